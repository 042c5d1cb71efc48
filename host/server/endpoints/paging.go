package endpoints

import (
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/pb"
)

// Every list is paginated so that no response grows with the cluster: a
// client follows QueryMeta.next_token until it is empty.
const (
	// DefaultPerPage is the page size of a list that names none.
	DefaultPerPage = 100
	// MaxPerPage is the largest page a list returns; asking for more is
	// refused rather than silently clamped, so a client never mistakes a
	// short page for the whole list.
	MaxPerPage = 1000
)

// PerPage is the page size q asks for.
func PerPage(q *pb.QueryOptions) (int, error) {
	n := q.GetPerPage()
	switch {
	case n == 0:
		return DefaultPerPage, nil
	case n > MaxPerPage:
		return 0, status.Errorf(codes.InvalidArgument, "per_page %d is over the maximum of %d", n, MaxPerPage)
	}
	return int(n), nil
}

// RefuseBlocking rejects a blocking query on a list that cannot block, so
// a caller never waits believing it watches for changes.
func RefuseBlocking(q *pb.QueryOptions, what, why string) error {
	if q.GetMinIndex() != 0 {
		return status.Errorf(codes.InvalidArgument, "%s does not support blocking queries (index=%d): %s", what, q.GetMinIndex(), why)
	}
	return nil
}

// PageOf returns one page of items, which are sorted by key: up to n items
// that keep accepts (nil keeps all), starting at the first whose key is at
// or after from; next is the key of the first kept item after the page, ""
// when the page is the last. A binary search finds the start, so a page
// costs its own size plus the items keep skips.
func PageOf[T any](items []T, key func(T) string, from string, n int, keep func(T) bool) (page []T, next string) {
	i := sort.Search(len(items), func(i int) bool { return key(items[i]) >= from })
	for ; i < len(items); i++ {
		it := items[i]
		if keep != nil && !keep(it) {
			continue
		}
		if len(page) == n {
			return page, key(it)
		}
		page = append(page, it)
	}
	return page, ""
}
