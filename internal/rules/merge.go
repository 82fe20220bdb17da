package rules

// Merge returns the rules file f with the dynamic rules applied: a dynamic
// rule replaces the file's rule of the same id, the others are added. f and
// dynamic are not modified; exemptions and detection stay the file's.
func Merge(f *File, dynamic []Rule) *File {
	override := make(map[string]bool, len(dynamic))
	for _, r := range dynamic {
		override[r.ID] = true
	}
	merged := make([]Rule, 0, len(f.Rules)+len(dynamic))
	for _, r := range f.Rules {
		if !override[r.ID] {
			merged = append(merged, r)
		}
	}
	return &File{Rules: append(merged, dynamic...), Exempt: f.Exempt, Detection: f.Detection}
}
