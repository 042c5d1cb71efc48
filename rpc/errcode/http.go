package errcode

import (
	"net/http"

	"google.golang.org/grpc/codes"
)

// StatusClientClosedRequest is the status the API answers a request whose
// caller went away with (codes.Canceled); nginx's 499, as gRPC gateways use.
const StatusClientClosedRequest = 499

// codeInfo is one row of the table from gRPC code to HTTP.
type codeInfo struct {
	name string
	http int
}

// names is the one table from gRPC code to the API's JSON "code" and HTTP
// status, indexed by code. It follows google.rpc.Code's HTTP mapping except
// for two codes that berth uses for the cluster's state refusing a request,
// which are 409 Conflict, as Kubernetes answers such conflicts:
//   - FailedPrecondition (google.rpc: 400): "the cluster's state refuses
//     this" (a server that must be upgraded) is not a malformed request.
//   - ResourceExhausted (google.rpc: 429): berth reserves it for "no free
//     write claim" on a single-writer volume. 429 Too Many Requests tells
//     HTTP clients and proxies to back off and retry on their own, but a
//     claimed volume stays claimed until its holder lets go; retrying is the
//     caller's decision, not a rate limiter's.
var names = [...]codeInfo{
	codes.OK:                 {"ok", http.StatusOK},
	codes.Canceled:           {"canceled", StatusClientClosedRequest},
	codes.Unknown:            {"unknown", http.StatusInternalServerError},
	codes.InvalidArgument:    {"invalid_argument", http.StatusBadRequest},
	codes.DeadlineExceeded:   {"deadline_exceeded", http.StatusGatewayTimeout},
	codes.NotFound:           {"not_found", http.StatusNotFound},
	codes.AlreadyExists:      {"already_exists", http.StatusConflict},
	codes.PermissionDenied:   {"permission_denied", http.StatusForbidden},
	codes.ResourceExhausted:  {"resource_exhausted", http.StatusConflict},
	codes.FailedPrecondition: {"failed_precondition", http.StatusConflict},
	codes.Aborted:            {"aborted", http.StatusConflict},
	codes.OutOfRange:         {"out_of_range", http.StatusBadRequest},
	codes.Unimplemented:      {"unimplemented", http.StatusNotImplemented},
	codes.Internal:           {"internal", http.StatusInternalServerError},
	codes.Unavailable:        {"unavailable", http.StatusServiceUnavailable},
	codes.DataLoss:           {"data_loss", http.StatusInternalServerError},
	codes.Unauthenticated:    {"unauthenticated", http.StatusUnauthorized},
}

// HTTPStatus returns the HTTP status the API answers code with; 500 for a
// code gRPC does not define.
func HTTPStatus(code codes.Code) int {
	if int(code) < len(names) {
		return names[code].http
	}
	return http.StatusInternalServerError
}

// Name returns the API's JSON error code for code, the snake_case name of
// the gRPC code ("not_found", "failed_precondition"); "unknown" for a code
// gRPC does not define.
func Name(code codes.Code) string {
	if int(code) < len(names) {
		return names[code].name
	}
	return names[codes.Unknown].name
}

// FromName returns the gRPC code whose Name is name, for clients that read
// the API's JSON errors; Unknown and false for a name no code has.
func FromName(name string) (codes.Code, bool) {
	for c, info := range names {
		if info.name == name {
			return codes.Code(c), true
		}
	}
	return codes.Unknown, false
}
