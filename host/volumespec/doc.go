// Package volumespec reads CSI volume specifications — the files given to
// `berth volume register` and `berth volume create` — and checks volumes
// that arrive through the API.
//
// Parse reads one file, HCL or HCL's JSON syntax (".json"), shaped like
// Nomad's volume specification:
//
//	id        = "data"
//	name      = "data"
//	type      = "csi"
//	plugin_id = "hostpath"
//	capacity_min = "1GiB"
//	capability {
//	  access_mode     = "single-node-writer"
//	  attachment_mode = "file-system"
//	}
//	mount_options { fs_type = "ext4"  mount_flags = ["noatime"] }
//	topology_request { required { topology { segments = { rack = "r1" } } } }
//	secrets    { token = "..." }
//	parameters { tier = "fast" }
//
// into a *pb.Volume. Every problem is reported at once as *Errors, each with
// its file:line:col, the field path and, for a misspelt key or word, "did you
// mean". Validate is the same semantic check without positions, for volumes
// sent as JSON to the servers (register when Register is true: an
// external_id and no create-only fields; create otherwise).
//
// The HCL conventions (HCL 1's compact style, the JSON root checks,
// suggestions) are internal/hclsrc's, shared with the agent config and job
// readers.
package volumespec
