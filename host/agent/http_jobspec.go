package agent

import (
	"net/http"
	"path/filepath"
	"strings"

	"berth.dev/berth/host/jobspec"
)

// jobParse is POST /v1/jobs/parse: the body is a job file's source, HCL, or
// HCL's JSON syntax with ?format=json (or a ?filename= ending in .json);
// the answer is the job in the API's JSON, with its defaults filled in, as
// PUT /v1/jobs takes it. ?filename= names the file in error positions
// (default "job.hcl"). A file with errors is 400 listing every one with its
// line, column and field. Drivers are not checked here: which exist depends
// on the nodes, and the servers check them when the job is registered.
func (a *Agent) jobParse(w http.ResponseWriter, r *http.Request) error {
	v := r.URL.Query()
	name := v.Get("filename")
	switch f := v.Get("format"); f {
	case "", "hcl":
		if name == "" {
			name = "job.hcl"
		}
	case "json":
		if name == "" {
			name = "job.json"
		} else if !strings.EqualFold(filepath.Ext(name), ".json") {
			return badRequest("query parameter filename=%q: with format=json it must end in .json", name)
		}
	default:
		return badRequest("query parameter format=%q: must be hcl or json", f)
	}
	src, err := readBody(w, r)
	if err != nil {
		return err
	}
	job, err := jobspec.Parse(name, src)
	if err != nil {
		return err
	}
	return writeProto(w, job)
}
