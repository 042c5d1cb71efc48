package errcode

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestEverySentinelHasACode is the rule of this package, checked on the real
// tree: every exported Err… variable in the module carries a gRPC code, so no
// refusal reaches the API as Unknown / HTTP 500 by omission.
func TestEverySentinelHasACode(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	res, err := walkSentinels(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.violations {
		t.Error(v)
	}
	// The walk must have seen the tree, not an empty directory: a few
	// sentinels of each kind, with the codes they are meant to have.
	for key, want := range map[string]codes.Code{
		"berth.dev/berth/fsm.ErrNodeNotFound":                         codes.NotFound,
		"berth.dev/berth/fsm.ErrSnapshotCorrupt":                      codes.DataLoss,
		"berth.dev/berth/host/server.ErrBadArchive":                   codes.InvalidArgument,
		"berth.dev/berth/sdk.ErrTaskNotFound":                         codes.NotFound,
		"berth.dev/berth/sdk/procfs.ErrNoProcess":                     codes.NotFound,
		"berth.dev/berth/builtin/csi/hostpath.ErrUnsupportedPlatform": codes.Unimplemented,
	} {
		got, why := res.codeOf(key)
		if why != "" || got != want {
			t.Errorf("%s: code %s (%s), want %s", key, got, why, want)
		}
	}
	if testing.Verbose() {
		keys := make([]string, 0, len(res.sentinels))
		for k := range res.sentinels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			code, _ := res.codeOf(k)
			t.Logf("%-70s %s", strings.TrimPrefix(k, "berth.dev/berth/"), code)
		}
	}
}

// TestWalkerCatchesUncodedSentinels runs the walker over a small module in
// testdata holding each way of getting it wrong (and right), and checks it
// reports exactly the wrong ones, with file and line.
func TestWalkerCatchesUncodedSentinels(t *testing.T) {
	res, err := walkSentinels(filepath.Join("testdata", "walk"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`bad/errors.go:14:5: berth.dev/berth/bad.ErrPlain has no code: declared with errors.New("plain"); declare it with errcode.New(codes.X, "...")`,
		`bad/errors.go:18:2: berth.dev/berth/bad.ErrUnknown has no code: code Unknown classifies nothing; pick the code callers should branch on`,
		`bad/errors.go:20:2: berth.dev/berth/bad.ErrOK has no code: code OK classifies nothing; pick the code callers should branch on`,
		`bad/errors.go:22:2: berth.dev/berth/bad.ErrIndirect has no code: the code someCode is not a codes.X constant the check can read`,
		`bad/errors.go:24:2: berth.dev/berth/bad.ErrWrapped has no code: declared with fmt.Errorf("wrapped: %w", good.ErrMissing); declare it with errcode.New(codes.X, "...")`,
		`bad/errors.go:26:2: berth.dev/berth/bad.ErrAliasOfPlain has no code: alias of berth.dev/berth/bad.ErrPlain, which has no code`,
		`bad/errors.go:30:2: berth.dev/berth/bad.ErrForeign has no code: alias of fmt.ErrUnsupported, which is not an exported berth sentinel`,
		`bad/errors.go:32:2: berth.dev/berth/bad.ErrNone has no code: no initializer of its own; declare it with errcode.New(codes.X, "...")`,
		// sdk/: only sdkerr.New codes a sentinel; a table row does not.
		`sdk/errors.go:17:2: berth.dev/berth/sdk.ErrTabled has no code: declared with errors.New("tabled"); declare it with sdkerr.New(codes.X, "REASON", "...") (sdk/internal/sdkerr)`,
		`sdk/errors.go:19:2: berth.dev/berth/sdk.ErrUnknownCode has no code: code Unknown classifies nothing; pick the code callers should branch on`,
		`sdk/errors.go:21:2: berth.dev/berth/sdk.ErrNoReason has no code: its wire reason is empty`,
		`sdk/errors.go:23:2: berth.dev/berth/sdk.ErrReasonTaken has no code: its wire reason "DECLARED" is berth.dev/berth/sdk.ErrDeclared's already (sdk/errors.go:15:43)`,
		`sdk/errors.go:25:2: berth.dev/berth/sdk.ErrReasonVar has no code: the wire reason reasonVar is not a string literal the check can read`,
		`sdk/errors.go:27:2: berth.dev/berth/sdk.ErrShort has no code: sdkerr.New needs a code, a wire reason and a message`,
		`sdk/errors.go:29:2: berth.dev/berth/sdk.ErrBerths has no code: declared with errcode.New(codes.NotFound, "berth's"); declare it with sdkerr.New(codes.X, "REASON", "...") (sdk/internal/sdkerr)`,
		`sdk/helper/helper.go:15:5: berth.dev/berth/sdk/helper.ErrForgotten has no code: declared with errors.New("forgotten"); declare it with sdkerr.New(codes.X, "REASON", "...") (sdk/internal/sdkerr)`,
		`sdk/helper/helper.go:18:5: berth.dev/berth/sdk/helper.ErrHelpedAgain has no code: its wire reason "HELPED" is berth.dev/berth/sdk/helper.ErrHelped's already (sdk/helper/helper.go:12:54)`,
	}
	got := res.violations
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\n\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for key, code := range map[string]codes.Code{
		"berth.dev/berth/good.ErrMissing":      codes.NotFound,
		"berth.dev/berth/good.ErrGone":         codes.NotFound,
		"berth.dev/berth/good.ErrFull":         codes.ResourceExhausted,
		"berth.dev/berth/good.ErrBusy":         codes.Unavailable,
		"berth.dev/berth/bad.ErrAliasOfGood":   codes.NotFound,
		"berth.dev/berth/sdk.ErrDeclared":      codes.NotFound,
		"berth.dev/berth/sdk/helper.ErrHelped": codes.FailedPrecondition,
		"berth.dev/berth/sdk.ErrAliasOfHelper": codes.FailedPrecondition,
	} {
		if got, why := res.codeOf(key); why != "" || got != code {
			t.Errorf("%s: code %s (%s), want %s", key, got, why, code)
		}
	}
	for _, skipped := range []string{"good.Errors", "good.errQuiet", "good.ErrInTest", "good/testdata.ErrInTestdata", "examples/other.ErrOtherModule"} {
		if _, ok := res.sentinels["berth.dev/berth/"+skipped]; ok {
			t.Errorf("walker took %s for a sentinel", skipped)
		}
	}
}
