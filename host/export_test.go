package host

// ScanGroupsFromLinks is Scan learning IOMMU groups' members from the functions' links (true)
// or by listing the groups (false), whatever they cost.
func ScanGroupsFromLinks(root Root, links bool) (*Inventory, error) {
	if links {
		return scan(root, groupsFromLinksAlways)
	}
	return scan(root, groupsListed)
}

// HealthPollOnce is one fast poll of a HealthWatch (BenchmarkHealthPoll).
func HealthPollOnce(root Root) int { return len((&HealthWatch{Root: root}).signs()) }
