package host

// SetGroupsFromLinks makes Scan learn IOMMU groups' members from the functions' links (true)
// or by listing the groups (false), whatever they cost, until the returned function restores
// the rule.
func SetGroupsFromLinks(links bool) (restore func()) {
	old := groupsFromLinks
	groupsFromLinks = func(int, int) bool { return links }
	return func() { groupsFromLinks = old }
}

// HealthPollOnce is one fast poll of a HealthWatch (BenchmarkHealthPoll).
func HealthPollOnce(root Root) int { return len((&HealthWatch{Root: root}).signs()) }
