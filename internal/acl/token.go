package acl

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Token types.
const (
	TypeClient     = "client"
	TypeManagement = "management"
)

// Headers a request carries its token in.
const (
	TokenHeader = "X-Berth-Token"
	AuthHeader  = "Authorization"
)

// SecretBytes is the size of a token secret before encoding: 256 bits.
const SecretBytes = 32

// NewSecret returns a new secret (64 hex digits) read from r — crypto/rand
// when r is nil — and its hash, the only form in which it is stored.
func NewSecret(r io.Reader) (secret string, hash []byte, err error) {
	if r == nil {
		r = rand.Reader
	}
	var b [SecretBytes]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", nil, fmt.Errorf("token secret: %w", err)
	}
	secret = hex.EncodeToString(b[:])
	return secret, HashSecret(secret), nil
}

// HashSecret is the stored form of secret: its SHA-256. A secret is 256
// random bits, so a fast unsalted hash is enough: there is nothing to
// guess a dictionary from.
func HashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Match reports, in time independent of where they differ, whether secret
// hashes to hash.
func Match(hash []byte, secret string) bool {
	return subtle.ConstantTimeCompare(hash, HashSecret(secret)) == 1
}

// ValidSecret reports whether s has the form of a secret: 64 lowercase hex
// digits.
func ValidSecret(s string) bool {
	if len(s) != 2*SecretBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// FromHeader returns the secret a request carries: in X-Berth-Token, or
// in Authorization as "Bearer <secret>" (the scheme in any case, RFC
// 9110). It returns "" when there is none, and ErrBadTokenHeader for an
// Authorization of another scheme, a header given twice, two different
// secrets, or a value that is not a secret.
func FromHeader(h http.Header) (string, error) {
	var found []string
	if vs := h.Values(TokenHeader); len(vs) > 0 {
		if len(vs) > 1 {
			return "", fmt.Errorf("%w: %s given %d times", ErrBadTokenHeader, TokenHeader, len(vs))
		}
		found = append(found, strings.TrimSpace(vs[0]))
	}
	if vs := h.Values(AuthHeader); len(vs) > 0 {
		if len(vs) > 1 {
			return "", fmt.Errorf("%w: %s given %d times", ErrBadTokenHeader, AuthHeader, len(vs))
		}
		scheme, cred, ok := strings.Cut(strings.TrimSpace(vs[0]), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", fmt.Errorf("%w: %s must be \"Bearer <token>\"", ErrBadTokenHeader, AuthHeader)
		}
		found = append(found, strings.TrimSpace(cred))
	}
	return pick(found)
}

// FromMetadata is FromHeader for gRPC metadata values of the token key
// (lower-case "x-berth-token").
func FromMetadata(vs []string) (string, error) {
	if len(vs) > 1 {
		return "", fmt.Errorf("%w: %s given %d times", ErrBadTokenHeader, MetadataKey, len(vs))
	}
	return pick(vs)
}

// MetadataKey is the gRPC metadata key a token travels under.
const MetadataKey = "x-berth-token"

func pick(found []string) (string, error) {
	secret := ""
	for _, s := range found {
		if s == "" {
			continue
		}
		if !ValidSecret(s) {
			return "", fmt.Errorf("%w: a token is 64 hex digits", ErrBadTokenHeader)
		}
		if secret != "" && secret != s {
			return "", fmt.Errorf("%w: two different tokens", ErrBadTokenHeader)
		}
		secret = s
	}
	return secret, nil
}
