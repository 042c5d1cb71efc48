package acl

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"testing"

	"berth.dev/berth/rpc"
)

func TestNewSecret(t *testing.T) {
	s1, h1, err := NewSecret(nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, _, _ := NewSecret(nil)
	if s1 == s2 || !ValidSecret(s1) || len(s1) != 64 {
		t.Fatalf("secrets %q %q", s1, s2)
	}
	want := sha256.Sum256([]byte(s1))
	if !bytes.Equal(h1, want[:]) {
		t.Error("hash is not the SHA-256 of the secret")
	}
	if !Match(h1, s1) || Match(h1, s2) || Match(nil, s1) {
		t.Error("Match")
	}
	if _, _, err := NewSecret(strings.NewReader("short")); err == nil {
		t.Error("a short random source was accepted")
	}
}

func TestFromHeader(t *testing.T) {
	sec := strings.Repeat("ab", 32)
	other := strings.Repeat("cd", 32)
	for _, tc := range []struct {
		name string
		h    http.Header
		want string
		bad  bool
	}{
		{"none", http.Header{}, "", false},
		{"x-berth-token", http.Header{"X-Berth-Token": {sec}}, sec, false},
		{"bearer", http.Header{"Authorization": {"Bearer " + sec}}, sec, false},
		{"bearer lower case", http.Header{"Authorization": {"bearer  " + sec}}, sec, false},
		{"both same", http.Header{"X-Berth-Token": {sec}, "Authorization": {"Bearer " + sec}}, sec, false},
		{"both different", http.Header{"X-Berth-Token": {sec}, "Authorization": {"Bearer " + other}}, "", true},
		{"basic", http.Header{"Authorization": {"Basic abc"}}, "", true},
		{"bearer alone", http.Header{"Authorization": {"Bearer"}}, "", true},
		{"twice", http.Header{"X-Berth-Token": {sec, sec}}, "", true},
		{"not hex", http.Header{"X-Berth-Token": {strings.Repeat("z", 64)}}, "", true},
		{"upper case hex", http.Header{"X-Berth-Token": {strings.ToUpper(sec)}}, "", true},
		{"empty", http.Header{"X-Berth-Token": {""}}, "", false},
	} {
		got, err := FromHeader(tc.h)
		if tc.bad != (err != nil) || got != tc.want {
			t.Errorf("%s: got %q, %v", tc.name, got, err)
		}
		if err != nil && !errors.Is(err, ErrBadTokenHeader) {
			t.Errorf("%s: %v is not ErrBadTokenHeader", tc.name, err)
		}
		if err != nil && strings.Contains(err.Error(), sec) {
			t.Errorf("%s: the error %q holds the secret", tc.name, err)
		}
	}
}

func TestFromMetadata(t *testing.T) {
	sec := strings.Repeat("0f", 32)
	if got, err := FromMetadata([]string{sec}); err != nil || got != sec {
		t.Errorf("got %q, %v", got, err)
	}
	if got, err := FromMetadata(nil); err != nil || got != "" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := FromMetadata([]string{sec, sec}); !errors.Is(err, ErrBadTokenHeader) {
		t.Errorf("got %v", err)
	}
}

// TestMetadataKeyIsTheForwardedOne: the key FromMetadata reads is the one
// forwarded calls carry the token under.
func TestMetadataKeyIsTheForwardedOne(t *testing.T) {
	if MetadataKey != rpc.TokenKey {
		t.Fatalf("acl.MetadataKey %q, rpc.TokenKey %q", MetadataKey, rpc.TokenKey)
	}
}
