package jobspec

import (
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"

	"berth.dev/berth/internal/hclsrc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// Option changes what Parse checks.
type Option func(*options)

type options struct {
	drivers map[string]*driverpb.Schema
	limits  *Limits
}

// WithDrivers makes Parse check each task's driver and config block against
// the drivers' task config schemas, by driver name: an unknown driver, an
// unknown or missing config key and a value of the wrong type are errors
// with their positions. A driver mapped to a nil schema is known, its config
// unchecked. Without WithDrivers the drivers are not checked (the server
// checks them against its nodes when the job is registered).
func WithDrivers(schemas map[string]*driverpb.Schema) Option {
	return func(o *options) { o.drivers = schemas }
}

// ParseFile reads the job file at path and parses it (see Parse).
func ParseFile(path string, opts ...Option) (*pb.Job, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("job file: %w", err)
	}
	return Parse(path, src, opts...)
}

// Parse parses a job file: HCL, or HCL's JSON syntax when filename ends in
// ".json"; filename names the file in errors and is kept in the job's
// source_file. The job has its defaults filled in and has passed ValidateJob
// (and, with WithDrivers, the driver checks). On failure the error is
// *Errors listing every problem, each with its position and field path.
func Parse(filename string, src []byte, opts ...Option) (*pb.Job, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	d := newDecoder()
	// Every string of a job is a protobuf string, which must be UTF-8; HCL
	// would pass invalid bytes through into names and values.
	if !utf8.Valid(src) {
		d.Errs.Add(invalidUTF8(filename, src), "", ErrSyntax, "syntax error: the file is not valid UTF-8")
		return nil, errorsOf(d.Errs)
	}
	body := d.Parse(filename, src, "job file")
	if body == nil {
		return nil, errorsOf(d.Errs)
	}
	d.pos[""] = Pos{File: filename, Line: 1, Column: 1}

	job := d.file(body)
	if job == nil {
		return nil, errorsOf(d.Errs)
	}
	job.SourceFile = filename
	errs := &Errors{Errs: d.Errs}
	v := &validator{errs: errs, pos: d.pos, skip: d.Reported}
	v.job(job)
	if o.drivers != nil {
		v.drivers(job, o.drivers)
	}
	if o.limits != nil {
		v.limits(job, *o.limits)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return job, nil
}

// invalidUTF8 is the position of the first byte of src that is not UTF-8.
func invalidUTF8(filename string, src []byte) Pos {
	p := Pos{File: filename, Line: 1, Column: 1}
	for len(src) > 0 {
		r, n := utf8.DecodeRune(src)
		if r == utf8.RuneError && n <= 1 {
			break
		}
		if r == '\n' {
			p.Line, p.Column = p.Line+1, 1
		} else {
			p.Column++
		}
		src = src[n:]
	}
	return p
}

var (
	jobBlock    = hcl.BlockHeaderSchema{Type: "job", LabelNames: []string{"id"}}
	groupBlock  = hcl.BlockHeaderSchema{Type: "group", LabelNames: []string{"name"}}
	taskBlock   = hcl.BlockHeaderSchema{Type: "task", LabelNames: []string{"name"}}
	volumeBlock = hcl.BlockHeaderSchema{Type: "volume", LabelNames: []string{"name"}}
)

var blocks = hclsrc.Blocks

// file decodes the one job block of a file; nil when there is none.
func (d *decoder) file(body hcl.Body) *pb.Job {
	content := d.Content(body, path{}, hclsrc.Schema{Blocks: []hcl.BlockHeaderSchema{jobBlock}})
	jobs := content.Blocks.OfType("job")
	switch {
	case len(jobs) == 0:
		if len(d.Errs) == 0 {
			d.Errs.Add(d.pos[""], "", ErrInvalidJob, `no job block: a job file holds one job "ID" { ... }`)
		}
		return nil
	case len(jobs) > 1:
		for _, b := range jobs[1:] {
			d.Errs.Add(d.Pos(b.DefRange), "", ErrInvalidJob, "a job file holds one job; job %q is another (the first is at %s)",
				b.Labels[0], d.Pos(jobs[0].DefRange))
		}
	}
	return d.job(jobs[0])
}

func (d *decoder) job(b *hcl.Block) *pb.Job {
	job := &pb.Job{Id: b.Labels[0]}
	d.pos[""] = d.Pos(b.DefRange)
	d.pos["id"] = d.Pos(b.LabelRanges[0])
	p := path{}
	c := d.Content(b.Body, p, hclsrc.Schema{
		Attrs:  []string{"name", "type", "priority"},
		Blocks: append(blocks("meta", "constraint", "update"), groupBlock),
	})
	job.Name = job.Id
	if a := c.Attributes["name"]; a != nil {
		if s, ok := d.str(a, p.f("name")); ok {
			job.Name = s
		}
	}
	job.Type = pb.JobType_JOB_TYPE_SERVICE
	if a := c.Attributes["type"]; a != nil {
		if s, ok := d.str(a, p.f("type")); ok {
			job.Type = jobTypes[s]
			if job.Type == pb.JobType_JOB_TYPE_UNSPECIFIED {
				d.ErrAt(a.Expr.Range(), p.f("type"), ErrInvalidJob, "unknown job type %q%s", s, didYouMean(s, jobTypeWords))
			}
		}
	}
	job.Priority = DefaultPriority
	if a := c.Attributes["priority"]; a != nil {
		if n, ok := d.integer(a, p.f("priority")); ok {
			job.Priority = int32(n)
		}
	}
	if mb := d.Single(c.Blocks, "meta", p); mb != nil {
		job.Meta = d.StringMap(mb.Body, p.f("meta"))
	}
	job.Constraints = d.constraints(c.Blocks, p)
	job.Update = DefaultUpdate()
	if ub := d.Single(c.Blocks, "update", p); ub != nil {
		d.update(ub, p.f("update"), job.Update)
	}

	first := map[string]*hcl.Block{}
	for _, gb := range c.Blocks.OfType("group") {
		name := gb.Labels[0]
		if f := first[name]; f != nil {
			d.Duplicate(f, gb, p.in("group", name), fmt.Sprintf("group %q", name))
			continue
		}
		first[name] = gb
		job.Groups = append(job.Groups, d.group(gb, job))
	}
	return job
}

var (
	jobTypes = map[string]pb.JobType{
		"service": pb.JobType_JOB_TYPE_SERVICE,
		"batch":   pb.JobType_JOB_TYPE_BATCH,
		"system":  pb.JobType_JOB_TYPE_SYSTEM,
	}
	jobTypeWords = []string{"service", "batch", "system"}
)

// didYouMean is a hint naming the known word s was probably meant to be,
// or listing the known words.
func didYouMean(s string, known []string) string {
	if m := hclsrc.Suggest(s, known); m != "" {
		return fmt.Sprintf("; did you mean %q?", m)
	}
	return " (one of " + strings.Join(quoteAll(known), ", ") + ")"
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

func (d *decoder) update(b *hcl.Block, p path, u *pb.UpdateStrategy) {
	c := d.Content(b.Body, p, hclsrc.Schema{Attrs: []string{"max_parallel", "min_healthy_time"}})
	if a := c.Attributes["max_parallel"]; a != nil {
		if n, ok := d.integer(a, p.f("max_parallel")); ok {
			u.MaxParallel = int32(n)
		}
	}
	if a := c.Attributes["min_healthy_time"]; a != nil {
		if n, ok := d.duration(a, p.f("min_healthy_time")); ok {
			u.MinHealthyMs = n
		}
	}
}

// constraints decodes the constraint blocks among bs, inside p.
func (d *decoder) constraints(bs hcl.Blocks, p path) []*pb.Constraint {
	var out []*pb.Constraint
	for _, b := range bs.OfType("constraint") {
		cp := p.at("constraint", len(out))
		d.pos[cp.String()] = d.Pos(b.DefRange)
		c := d.Content(b.Body, cp, hclsrc.Schema{Attrs: []string{"attribute", "operator", "value", "distinct_hosts"}})
		con := &pb.Constraint{Operator: "="}
		if a := c.Attributes["attribute"]; a != nil {
			con.Attribute, _ = d.str(a, cp.f("attribute"))
		}
		if a := c.Attributes["operator"]; a != nil {
			con.Operator, _ = d.str(a, cp.f("operator"))
		}
		if a := c.Attributes["value"]; a != nil {
			if v, ok := d.Value(a, cp.f("value")); ok {
				// Versions and numbers are often written unquoted.
				s, err := d.Style.Text(v)
				if err != nil {
					d.Fail(a.Expr.Range(), cp.f("value"), err)
				}
				con.Value = s
			}
		}
		if a := c.Attributes["distinct_hosts"]; a != nil {
			on, ok := d.boolean(a, cp.f("distinct_hosts"))
			if ok && !on {
				continue // distinct_hosts = false asks for nothing
			}
			if c.Attributes["operator"] != nil || c.Attributes["attribute"] != nil || c.Attributes["value"] != nil {
				d.ErrAt(a.NameRange, cp.f("distinct_hosts"), ErrInvalidJob,
					"distinct_hosts is a constraint of its own; write it in a constraint block without attribute, operator or value")
			}
			con = &pb.Constraint{Operator: OpDistinctHosts, Value: "true"}
			d.pos[cp.f("operator").String()] = d.Pos(a.NameRange)
		}
		if con.Operator == "==" {
			con.Operator = OpEqual
		}
		out = append(out, con)
	}
	return out
}
