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
var parseJobSpec = jobspec.Parse

// readJobFile reads and parses a job file; "-" reads stdin (as HCL).
func readJobFile(path string, stdin io.Reader, opts ...jobspec.Option) (*pb.Job, error) {
	name, src, err := readJobSource(path, stdin)
	if err != nil {
		return nil, err
	}
	return parseJob(name, src, opts...)
}

// readJobSource reads a job file, or stdin for "-", and returns the name
// its errors go by.
func readJobSource(path string, stdin io.Reader) (string, []byte, error) {
	var src []byte
	var err error
	if path == "-" {
		src, err = io.ReadAll(stdin)
		path = "<stdin>"
	} else {
		src, err = os.ReadFile(path)
	}
	if err != nil {
		return "", nil, fmt.Errorf("reading job file: %w", err)
	}
	return path, src, nil
}

func parseJob(name string, src []byte, opts ...jobspec.Option) (*pb.Job, error) {
	job, err := parseJobSpec(name, src, opts...)
	if err != nil {
		return nil, err
	}
	if job.GetId() == "" {
		return nil, fmt.Errorf("%s: the job has no ID", name)
	}
	return job, nil
}
