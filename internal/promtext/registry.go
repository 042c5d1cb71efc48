package promtext

import (
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Gathering collects metric families from Collectors.
type Gathering struct {
	fams map[string]*dto.MetricFamily
	errs []error
}

// Add adds a series to the family name. A family is one type with one
// help text: a series that disagrees is an error of the gathering, as a
// scraper would be misled by it.
func (g *Gathering) Add(name, help string, typ dto.MetricType, m *dto.Metric) {
	f, ok := g.fams[name]
	if !ok {
		f = &dto.MetricFamily{Name: new(name), Help: new(help), Type: typ.Enum()}
		g.fams[name] = f
	}
	switch {
	case f.GetType() != typ:
		g.errs = append(g.errs, fmt.Errorf("collected metric %s %s is of type %s but should be %s", name, m, typ, f.GetType()))
	case f.GetHelp() != help:
		g.errs = append(g.errs, fmt.Errorf("collected metric %s %s has help %q but should have %q", name, m, help, f.GetHelp()))
	default:
		if !slices.IsSortedFunc(m.GetLabel(), compareLabelNames) {
			// Sorted on a copy, as client_golang does: the pairs may be
			// the collector's.
			m.Label = slices.SortedStableFunc(slices.Values(m.Label), compareLabelNames)
		}
		f.Metric = append(f.Metric, m)
	}
}

func compareLabelNames(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) }

// Fail records an error of the gathering: its answer is an error.
func (g *Gathering) Fail(err error) { g.errs = append(g.errs, err) }

// Gather collects cs into metric families sorted by name, each family's
// series sorted as client_golang sorts them: by their number of labels,
// then their label values (in the order of the names); families without
// series are left out. Two series of one family with the same label names
// and values are an error.
func Gather(cs ...Collector) ([]*dto.MetricFamily, error) {
	g := &Gathering{fams: map[string]*dto.MetricFamily{}}
	for _, c := range cs {
		c.Collect(g)
	}
	names := make([]string, 0, len(g.fams))
	for name, f := range g.fams {
		if len(f.Metric) > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	fams := make([]*dto.MetricFamily, len(names))
	for i, name := range names {
		f := g.fams[name]
		slices.SortStableFunc(f.Metric, compareLabels)
		for j := 1; j < len(f.Metric); j++ {
			if compareLabels(f.Metric[j-1], f.Metric[j]) == 0 {
				g.errs = append(g.errs, fmt.Errorf("collected metric %q { %s} was collected before with the same name and label values", name, f.Metric[j]))
			}
		}
		fams[i] = f
	}
	return fams, errors.Join(g.errs...)
}

// compareLabels orders series as client_golang does: by their number of
// labels, then by their label values in the order of their (sorted) label
// names; series that tie there (client_golang leaves their order open) by
// their label names. It is 0 only for the same label names and values, so
// series with the same labels sort next to each other.
func compareLabels(a, b *dto.Metric) int {
	la, lb := a.GetLabel(), b.GetLabel()
	if c := cmp.Compare(len(la), len(lb)); c != 0 {
		return c
	}
	for i := range la {
		if c := strings.Compare(la[i].GetValue(), lb[i].GetValue()); c != 0 {
			return c
		}
	}
	for i := range la {
		if c := strings.Compare(la[i].GetName(), lb[i].GetName()); c != 0 {
			return c
		}
	}
	return 0
}

// Registry is a set of Collectors gathered together.
type Registry struct {
	mu sync.Mutex
	cs []Collector
}

// Register adds cs.
func (r *Registry) Register(cs ...Collector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cs = append(r.cs, cs...)
}

// Collect collects every registered Collector.
func (r *Registry) Collect(g *Gathering) {
	r.mu.Lock()
	cs := slices.Clone(r.cs)
	r.mu.Unlock()
	for _, c := range cs {
		c.Collect(g)
	}
}

// Handler serves the series of cs in the format the request accepts
// (Prometheus text, or its protobuf form), compressed with gzip when the
// request accepts it; ?name[]= keeps only the families named. A gathering
// that fails answers 500 with the error.
func Handler(cs ...Collector) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fams, err := Gather(cs...)
		if err != nil {
			w.Header().Del("Content-Encoding")
			http.Error(w, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
			return
		}
		format := expfmt.NegotiateAccept(r.Header, expfmt.DefaultAcceptedFormats()...)
		w.Header().Add("Vary", "Accept")
		w.Header().Add("Vary", "Accept-Encoding")
		w.Header().Set("Content-Type", string(format))
		var out io.Writer = w
		if acceptsGzip(r) {
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			defer gz.Close()
			out = gz
		}
		var only map[string]bool
		if names := r.URL.Query()["name[]"]; len(names) > 0 {
			only = map[string]bool{}
			for _, n := range names {
				only[n] = true
			}
		}
		enc := expfmt.NewEncoder(out, format)
		for _, f := range fams {
			if only != nil && !only[f.GetName()] {
				continue
			}
			if enc.Encode(f) != nil {
				return
			}
		}
		if c, ok := enc.(expfmt.Closer); ok {
			_ = c.Close()
		}
	})
}

// acceptsGzip chooses between the identity and gzip as client_golang's
// handler did: the offer with the highest q in Accept-Encoding, the
// identity first on a tie, the identity when nothing matches.
func acceptsGzip(r *http.Request) bool {
	best, bestQ := "identity", -1.0
	specs := acceptEncodings(r.Header.Values("Accept-Encoding"))
	for _, offer := range []string{"identity", "gzip"} {
		for _, s := range specs {
			if s.q > bestQ && (s.value == "*" || s.value == offer) {
				best, bestQ = offer, s.q
			}
		}
	}
	return best == "gzip" && bestQ != 0
}

type acceptSpec struct {
	value string
	q     float64
}

// acceptEncodings parses Accept-Encoding values: "gzip, deflate;q=0.5".
func acceptEncodings(values []string) []acceptSpec {
	var specs []acceptSpec
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			q := 1.0
			for p := range strings.SplitSeq(params, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if ok && strings.TrimSpace(k) == "q" {
					f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
					if err != nil {
						q = 0
					} else {
						q = f
					}
				}
			}
			specs = append(specs, acceptSpec{name, q})
		}
	}
	return specs
}
