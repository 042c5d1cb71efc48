package ui

import (
	"fmt"
	"html/template"
	"net/url"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/internal/units"
	"berth.dev/berth/rpc/pb"
)

// funcs are the templates' helpers. None returns template.HTML: every
// value they give is escaped by html/template where it lands.
func (h *Handler) funcs() template.FuncMap {
	return template.FuncMap{
		"word":   func(e protoreflect.Enum) string { return pb.EnumWord(e) },
		"when":   formatTime,
		"ago":    func(ns int64) string { return relTime(ns, h.now()) },
		"iso":    isoTime,
		"short":  shortID,
		"bytes":  formatBytes,
		"code":   func(c pb.GrpcCode) string { return codes.Code(c).String() },
		"jobURL": func(id string) string { return "/ui/jobs/" + url.PathEscape(id) },
		"allocURL": func(id string) string {
			return "/ui/allocs/" + url.PathEscape(id)
		},
		"nodeURL":   func(id string) string { return "/ui/nodes/" + url.PathEscape(id) },
		"pluginURL": func(id string) string { return "/ui/plugins/" + url.PathEscape(id) },
		"volumeURL": func(id string) string { return "/ui/volumes/" + url.PathEscape(id) },
		"nextURL":   nextURL,
		"segments":  segments,
		"stateClass": func(s string) string {
			switch s {
			case "running", "ready", "in-use", "attached", "healthy", "complete", "eligible", "alive":
				return "ok"
			case "failed", "lost", "down", "unhealthy", "dead", "disconnected":
				return "bad"
			default:
				return "warn"
			}
		},
		"healthWord": func(ok bool) string {
			if ok {
				return "healthy"
			}
			return "unhealthy"
		},
		"navClass": func(cur, item string) string {
			if cur == item {
				return "current"
			}
			return ""
		},
	}
}

// formatTime is a Unix-nanoseconds time in UTC, "-" when unset.
func formatTime(ns int64) string {
	if ns <= 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05 UTC")
}

// isoTime is a Unix-nanoseconds time for a <time datetime>, which the
// script reads to keep the relative text beside it current; "" when unset.
func isoTime(ns int64) string {
	if ns <= 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339)
}

// relTime is a Unix-nanoseconds time relative to now ("12s ago", "in
// 3m0s").
func relTime(ns int64, now time.Time) string {
	if ns <= 0 {
		return "-"
	}
	d := time.Unix(0, ns).Sub(now).Round(time.Second)
	if d < 0 {
		return (-d).String() + " ago"
	}
	return "in " + d.String()
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// formatBytes is a size in binary units (the CLI's, internal/units).
func formatBytes(n int64) string {
	if n < 0 {
		return fmt.Sprintf("%d B", n)
	}
	return units.Bytes(uint64(n))
}

// nextURL is the link to a list's next page.
func nextURL(base, token string) string {
	return base + "?next=" + url.QueryEscape(token)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// segments is a topology's segments, "k=v, k=v".
func segments(t *pb.Topology) string {
	var kv []string
	for _, k := range sortedKeys(t.GetSegments()) {
		kv = append(kv, k+"="+t.GetSegments()[k])
	}
	return strings.Join(kv, ", ")
}
