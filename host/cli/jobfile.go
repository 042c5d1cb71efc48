package cli

import (
	"fmt"
	"io"
	"os"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// parseJobSpec turns a job file (HCL, or HCL's JSON syntax) into a job; its
// errors name file:line:col and the field. It is host/jobspec's Parse,
// which the job commands reach through this variable so that their tests
// can hand them jobs without depending on the spec's syntax.
var parseJobSpec = func(filename string, _ []byte) (*pb.Job, error) {
	return nil, fmt.Errorf("%s: %w", filename, errNoJobspec)
}

// errNoJobspec is what parseJobSpec answers until host/jobspec is linked in.
var errNoJobspec = errcode.New(codes.Unimplemented, "this berth cannot parse job files: host/jobspec is not linked in")

// readJobFile reads and parses a job file; "-" reads stdin.
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
