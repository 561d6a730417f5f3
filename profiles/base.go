package profiles

// Named is embedded by plugins to implement Plugin.
type Named struct{ TN TypedName }

// NewNamed returns a Named for a plugin instance.
func NewNamed(pluginType, name string) Named {
	if name == "" {
		name = pluginType
	}
	return Named{TN: TypedName{Type: pluginType, Name: name}}
}

// TypedName implements Plugin.
func (n Named) TypedName() TypedName { return n.TN }
