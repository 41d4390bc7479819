package host

// PLACEHOLDER: the inventory issue replaces this file with the real scan.

// Scan reads the inventory of the host under root.
func Scan(root Root) (*Inventory, error) {
	return nil, ErrUnsupported
}
