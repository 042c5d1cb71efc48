package cli

import (
	"fmt"
	"io"
	"os"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/rpc/pb"
)

// parseJobSpec turns a job file (HCL, or HCL's JSON syntax for .json) into a
// job with its defaults, validated; its errors list every problem with
// file:line:col and the field. The job commands reach jobspec through this
// variable so that their tests can hand them jobs in the API's JSON,
// independent of the spec's syntax (host/jobspec has its own tests).
var parseJobSpec = func(filename string, src []byte) (*pb.Job, error) {
	return jobspec.Parse(filename, src)
}

// readJobFile reads and parses a job file; "-" reads stdin (as HCL).
func readJobFile(path string, stdin io.Reader) (*pb.Job, error) {
	var src []byte
	var err error
	if path == "-" {
		src, err = io.ReadAll(stdin)
		path = "<stdin>"
	} else {
		src, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading job file: %w", err)
	}
	job, err := parseJobSpec(path, src)
	if err != nil {
		return nil, err
	}
	if job.GetId() == "" {
		return nil, fmt.Errorf("%s: the job has no ID", path)
	}
	return job, nil
}
