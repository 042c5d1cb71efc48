package api

import (
	"context"
	"fmt"
	"iter"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// ErrPageToken is returned by Pages and AllPages when an agent answers a
// page with a next_token that is not strictly after the one the request
// sent. Every list is in byte order of its keys and a token is the key the
// next page starts at, so a correct agent's tokens only grow; one that does
// not would make a client that follows it read the same pages forever.
var ErrPageToken = errcode.New(codes.Internal, "api: the agent's next_token does not advance")

// ListFunc reads one page of a list: Client.Nodes, Client.Members,
// Client.Peers, or a closure over any other paginated read.
type ListFunc[T any] func(context.Context, *QueryOptions) ([]T, *QueryMeta, error)

// Page is one page of a list with the meta of the read that returned it.
type Page[T any] struct {
	Items []T
	Meta  *QueryMeta
}

// Pages iterates over a list page by page, from q's NextToken on; q is not
// modified. It stops after the last page, at the first error (yielded with
// an empty Page), or when the loop body breaks, so a caller that finds
// what it looks for reads no further. Every next_token must be strictly
// greater than the token its request sent; one that is not ends the
// iteration with ErrPageToken, naming the endpoint and both tokens.
//
// Pages are read one after another, each at its own index: an item that
// changes between two reads shows up as it was when its page was read.
func Pages[T any](ctx context.Context, q *QueryOptions, list ListFunc[T]) iter.Seq2[Page[T], error] {
	return func(yield func(Page[T], error) bool) {
		pq := QueryOptions{}
		if q != nil {
			pq = *q
		}
		for {
			items, meta, err := list(ctx, &pq)
			if err != nil {
				yield(Page[T]{}, err)
				return
			}
			if meta == nil {
				meta = &QueryMeta{}
			}
			next := meta.NextToken
			// Checked before the page is handed out: the page of a
			// misbehaving agent is not trusted either.
			if next != "" && next <= pq.NextToken {
				yield(Page[T]{}, tokenError(meta.Endpoint, pq.NextToken, next))
				return
			}
			if !yield(Page[T]{Items: items, Meta: meta}, nil) || next == "" {
				return
			}
			pq.NextToken = next
		}
	}
}

func tokenError(endpoint, sent, got string) error {
	if endpoint == "" {
		endpoint = "the list"
	}
	return fmt.Errorf("%w: %s answered next_token %q to a request with next_token %q; a next page must start after the key the request started at, so following it could loop forever",
		ErrPageToken, endpoint, got, sent)
}

// AllPages follows a list through every page (see Pages) and returns all
// items with the last page's meta.
func AllPages[T any](ctx context.Context, q *QueryOptions, list ListFunc[T]) ([]T, *QueryMeta, error) {
	var all []T
	var last *QueryMeta
	for page, err := range Pages(ctx, q, list) {
		if err != nil {
			return nil, nil, err
		}
		all = append(all, page.Items...)
		last = page.Meta
	}
	return all, last, nil
}
