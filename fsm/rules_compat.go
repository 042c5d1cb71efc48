package fsm

import (
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// Forwarders for the shared rules that moved to internal/rules, kept for
// exactly the names host/server still calls through fsm. They are removed
// once host/server calls internal/rules; nothing else may use them.

// AllocServerTerminal is rules.AllocServerTerminal.
var AllocServerTerminal = rules.AllocServerTerminal

// AllocClientTerminal is rules.AllocClientTerminal.
var AllocClientTerminal = rules.AllocClientTerminal

// AllocTerminal is rules.AllocTerminal.
var AllocTerminal = rules.AllocTerminal

// AccessModeLimitsOf is rules.AccessModeLimitsOf.
var AccessModeLimitsOf = rules.AccessModeLimitsOf

// CheckClaim is rules.CheckClaim.
var CheckClaim = rules.CheckClaim

// Claimant is rules.Claimant.
var Claimant = rules.Claimant

// ClaimLive is rules.ClaimLive.
var ClaimLive = rules.ClaimLive

// AccessModeWord is rules.EnumWord of an access mode.
func AccessModeWord(m pb.VolumeAccessMode) string { return rules.EnumWord(m) }

// ClaimStateWord is rules.EnumWord of a claim state.
func ClaimStateWord(s pb.ClaimState) string { return rules.EnumWord(s) }

// AttachmentStateWord is rules.EnumWord of an attachment state.
func AttachmentStateWord(s pb.AttachmentState) string { return rules.EnumWord(s) }
