package hostpath

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ID prefixes. IDs are the prefix, 16 hex digits of creation time in
// nanoseconds and 8 random hex digits, so sorting IDs sorts by age and listing
// pages stay stable while objects come and go.
const (
	volumePrefix   = "vol-"
	snapshotPrefix = "snap-"
	groupPrefix    = "group-"
)

// idPattern is compiled on first use (lazyRegexp).
var idPattern = lazyRegexp(`^(vol|snap|group)-[0-9a-f]{24}$`)

func newID(prefix string, now time.Time) string {
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixNano()))
	if _, err := rand.Read(b[8:]); err != nil {
		// crypto/rand does not fail on Linux; a panic beats a duplicate ID.
		panic("hostpath: crypto/rand: " + err.Error())
	}
	return prefix + hex.EncodeToString(b[:])
}

// validID reports whether id is one this plugin could have made with prefix.
// Everything else is unknown by construction, which also keeps IDs safe to
// use as file names.
func validID(prefix, id string) bool {
	return strings.HasPrefix(id, prefix) && idPattern().MatchString(id)
}

// Page tokens are "after:<id>": the next page starts after that ID, so a
// token stays valid when the object it names is deleted.
const tokenPrefix = "after:"

// paginate returns the page of sorted ids that starts after token, at most
// max entries (0 = all), and the token for the next page.
func paginate(ids []string, prefix, token string, max int32) (page []string, next string, err error) {
	if max < 0 {
		return nil, "", status.Errorf(codes.InvalidArgument, "max_entries %d is negative", max)
	}
	sort.Strings(ids)
	start := 0
	if token != "" {
		after, ok := strings.CutPrefix(token, tokenPrefix)
		if !ok || !validID(prefix, after) {
			return nil, "", status.Errorf(codes.Aborted, "starting_token %q was not issued by this plugin; restart the listing without one", token)
		}
		start = sort.SearchStrings(ids, after)
		if start < len(ids) && ids[start] == after {
			start++
		}
	}
	page = ids[start:]
	if max > 0 && len(page) > int(max) {
		page = page[:max]
		next = tokenPrefix + page[len(page)-1]
	}
	return page, next, nil
}
