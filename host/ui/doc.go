// Package ui is the web UI every agent serves at /ui/: server-rendered
// HTML from the Go templates embedded in the binary, one stylesheet and one
// hand-written script (static/ui.js), with no build step and nothing
// fetched from elsewhere, so the pages work offline.
//
// # Data and authorization
//
// Every value a page shows is read through the agent's own HTTP API, in
// process (api.NewInProcessClient over the API's handler), with the token
// the page's request carries (X-Berth-Token or Authorization: Bearer). So a
// page sees exactly what the CLI would with that token: the same routes,
// the same authorization table rows, the same 403 naming the missing
// capability, which the page shows in place of the data. The UI's own
// routes are public shells in host/authz's table (need "none"): a page
// holds no data a caller could not read through the API with the same
// token, and a browser's navigation cannot send a header. The script keeps
// a token entered in the page in the tab's session storage and sends it as
// X-Berth-Token with every fragment it asks for and every action it takes.
//
// # Live pages
//
// A page is served whole, or as its main fragment (?fragment=main), the
// HTML of its <main>. A fragment request with ?index= blocks: each page
// names the API reads it watches (cheap one-item reads), and the request
// makes them all as blocking queries (the API's ?index=) until one answers
// with a newer index, then renders the fragment again. The index the
// script echoes is opaque to it: one raft index per watched read, so a
// read never waits on another table's index. There is no polling
// interval: a page waits for the state to change. A dropped connection
// shows a banner and is retried with backoff (0.5 s doubling to 30 s).
//
// # Actions
//
// Stop a job, drain a node (or end a drain), mark a node eligible or
// ineligible, release an operator claim: buttons that, after a
// confirmation, call the same JSON API the CLI uses (DELETE /v1/job/{id},
// PUT /v1/node/{id}/drain, PUT /v1/node/{id}/eligibility, DELETE
// /v1/volume/csi/{id}/claims/{claim}) from the script with the token; the
// page then updates from its blocking query like any other change.
//
// # Hardening
//
// html/template escapes every value (no template.HTML is made from data);
// every UI answer carries a Content-Security-Policy without inline scripts
// or styles (default-src 'self'; script-src 'self'; style-src 'self';
// frame-ancestors 'none'; object-src 'none'; base-uri 'none';
// form-action 'self'),
// X-Frame-Options DENY, X-Content-Type-Options nosniff and Referrer-Policy
// no-referrer. Secrets are never read: a volume's secrets are not shown
// (the API redacts them anyway) and the token lives only in the tab.
//
// Lists are paged as the API pages them (100 rows, a link to the next
// page), so a page's weight does not grow with the cluster. The overview
// shows counts, not rows, but the API has no count: it reads every node
// and every job to count them by status (its reads made at once), so its
// time, not its weight, grows with the cluster. `make bench`'s section ui
// measures every page's load on the bench's large state.
package ui
