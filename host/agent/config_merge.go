package agent

import (
	"maps"
	"slices"
)

// Merge returns a new Config: c with the fields other sets laid over it.
// Neither c nor other is changed.
//
// Which fields other "sets" depends on where it came from. For a Config from
// ParseConfig or LoadConfigFiles, it is the keys its files contain, so a file
// can set a value back to false or zero. For a Config built in Go (such as
// DefaultConfig, DevConfig or one built from command-line flags), it is the
// non-zero fields.
//
// Scalars and lists are replaced; plugins merge by name, and a plugin's
// config merges key by key, recursing into nested objects, with lists
// replaced.
func (c *Config) Merge(other *Config) *Config {
	out := c.Copy()
	if out.set == nil && other.set != nil {
		out.set = map[string]SourcePos{}
	}
	eachAttr(func(path string, def attrDef) {
		pos, isSet := other.set[path]
		if other.set == nil {
			isSet = !def.isZero(other)
		}
		if !isSet {
			return
		}
		def.copy(out, other)
		if out.set != nil {
			out.set[path] = pos
		}
	})
	if other.DevMode {
		out.DevMode = true
	}
	mergeHostVolumes(out, other)
	for _, name := range slices.Sorted(maps.Keys(other.Plugins)) {
		p := other.Plugins[name]
		if p == nil {
			continue
		}
		if out.Plugins == nil {
			out.Plugins = map[string]*PluginConfig{}
		}
		if pos, ok := other.set["plugin."+name]; ok && out.set != nil {
			out.set["plugin."+name] = pos
		}
		prev := out.Plugins[name]
		if prev == nil {
			out.Plugins[name] = p.Copy()
			continue
		}
		prev.Config = mergeMaps(prev.Config, p.Config)
		if p.Type != "" {
			prev.Type = p.Type
		}
		if p.Source != "" {
			prev.Source = p.Source
		}
	}
	return out
}

// mergeMaps returns a copy of base with over's keys laid over it: nested
// objects merge recursively, anything else in over replaces what base had.
func mergeMaps(base, over map[string]any) map[string]any {
	out := copyMap(base)
	if out == nil {
		out = make(map[string]any, len(over))
	}
	for k, v := range over {
		bm, bok := out[k].(map[string]any)
		om, ook := v.(map[string]any)
		if bok && ook {
			out[k] = mergeMaps(bm, om)
			continue
		}
		out[k] = copyValue(v)
	}
	return out
}

func copyMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = copyValue(v)
	}
	return out
}

func copyValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return copyMap(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = copyValue(e)
		}
		return out
	default:
		return v
	}
}
