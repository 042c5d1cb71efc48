package chaos

import (
	"math"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil/claimmodel"
	"berth.dev/berth/rpc/pb"
)

// apiCodes are the API's error codes the model tells apart.
var apiCodes = map[string]codes.Code{
	"":                    codes.OK,
	"resource_exhausted":  codes.ResourceExhausted,
	"invalid_argument":    codes.InvalidArgument,
	"failed_precondition": codes.FailedPrecondition,
	"not_found":           codes.NotFound,
}

// porcupineHistory turns the run's claim records into porcupine's
// operations against claimmodel.Model:
//   - an uncertain answer returns after everything (it may take effect
//     any time after its call);
//   - a claim refused other than for want of a free claim (the node down,
//     the plugin unhealthy, the volume not claimable now) is outside the
//     model: nothing changed;
//   - the API answers not_found to a release of a claim freed already,
//     which is the model's "done".
func porcupineHistory(recs []claimRecord) []porcupine.Operation {
	access := map[string]pb.VolumeAccessMode{}
	for _, v := range claimVolumes {
		access[v.id] = pb.VolumeAccessMode(pb.VolumeAccessMode_value["VOLUME_ACCESS_MODE_"+upperSnake(v.modes[0])])
	}
	var out []porcupine.Operation
	for _, r := range recs {
		op := claimmodel.Op{Kind: r.kind, Volume: r.volume, ID: r.id, Node: r.node, Write: r.write, Access: access[r.volume]}
		res := claimmodel.Result{Uncertain: r.uncertain}
		ret := r.ret
		if r.uncertain {
			ret = math.MaxInt64
		} else {
			code, known := apiCodes[r.code]
			switch {
			case r.kind == claimmodel.KindRelease && code == codes.NotFound:
				code = codes.OK
			case r.kind == claimmodel.KindClaim && code != codes.OK && code != codes.ResourceExhausted && code != codes.InvalidArgument:
				res.Outside = true
			case !known:
				res.Outside = true
			}
			res.Code = code
		}
		out = append(out, porcupine.Operation{ClientId: r.client, Input: op, Call: r.call, Output: res, Return: ret})
	}
	return out
}

func upperSnake(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// checkLinearizable checks the history; on a violation it writes
// porcupine's visualization to path.
func checkLinearizable(recs []claimRecord, path string) (porcupine.CheckResult, error) {
	ops := porcupineHistory(recs)
	res, info := porcupine.CheckOperationsVerbose(claimmodel.Model, ops, 2*time.Minute)
	if res != porcupine.Ok {
		return res, porcupine.VisualizePath(claimmodel.Model, info, path)
	}
	return res, nil
}
