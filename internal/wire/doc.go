// Package wire is rpr's protocol: what a client and a server write to
// Redis and read back, complete enough to write a peer in another
// language from it. Package store holds the other half, the key names and
// the Lua scripts (each documented beside its builder); together they are
// the contract, versioned by Version. This comment is the specification.
//
// # Services, shards, lanes
//
// A service is named by its fully qualified proto name ("pkg.v1.Greeter"),
// a method by "service/method". All keys of a service live under the
// prefix (default "rpr:v1:") and a Redis Cluster hash tag: {S} for the
// service-wide keys and shard 0, {S#k} for shard k of a service spread
// over N shards (1 <= N <= MaxShards). The shard count in force is the
// decimal string at {S}:shards (absent: 1); peers raise it, never lower
// it, as they start (operators lower it). A unary call goes to a shard
// chosen at random, an async request to ShardOfKey(its idempotency key).
// Within a shard, a lane is a separate queue ("default" has no suffix;
// lane L uses ":req:L" and ":retry:L"); ValidateLane gives the names.
//
// # Keys (with T = prefix + "{" + tag + "}")
//
//	T:req[:lane]       stream   requests; consumer group "workers"
//	T:retry[:lane]     zset     async requests due later; score = Redis ms
//	T:resp:<client>    stream   one caller instance's answers; group "client"
//	T:st:<id>          hash     request state (see below); TTL
//	T:dlq              stream   dead letters of the shard, all lanes
//	T:workers          hash     worker id -> Worker record (JSON)
//	{S}:routes         hash     method pattern -> JSON list of RouteRule
//	{S}:routes:changed channel  a publish tells callers to reload routes
//	{S}:limits         hash     rule name -> JSON LimitRule
//	{S}:rl:<rule>:<caller>      rate-limit state (zset or string)
//	{S}:cancel         channel  payload: the id of a call its caller cancelled
//	                            ("id caller signature" when signed)
//	{S}:schema         string   the service's FileDescriptorSet (protobuf)
//	{S}:shards         string   the shard count in force
//
// # Envelopes
//
// Every stream entry rpr writes has one field, Field ("e"), holding an
// envelope: a msgpack map with short string keys. Request is what a caller
// writes to a request stream, Response what a server writes to a caller's
// response stream; their struct tags give the keys, and omitempty marks
// the keys left out when zero. Integers are written in the smallest msgpack
// form; strings as str; payloads and details as bin; Metadata as a map of
// arrays of str (keys lower-case). A reader must refuse an envelope that
// is not a map, has an unknown key or a value of the wrong type, trailing
// bytes, a length longer than what is left, a missing "v" or a "v" it does
// not speak (VersionError); a server dead-letters such an entry and, when
// it can read an id and a reply-to of the service, answers the caller
// INVALID_ARGUMENT (FAILED_PRECONDITION for a version it does not speak).
//
// Request ids are "YYYYMMDD-BIZ4-<unix ms, 13 digits>-<10 random chars of
// Crockford base32>": the UTC date, a four-character business code
// (A-Z, 0-9), the time the call was made and 50 random bits.
//
// Times in envelopes and state hashes are milliseconds on Redis's clock
// (TIME), never a host's: each peer measures its offset to Redis and
// converts.
//
// # A unary call
//
// The caller (1) makes its response stream once per shard: XGROUP CREATE
// T:resp:<client> client $ MKSTREAM, PEXPIRE 60s, renewed every second
// while it lives (every 20 s once it has made no call and had no stream
// open for 10 s: nothing reads the TTL of a caller without streams); (2) writes the Request (Kind KindUnary, Deadline set,
// ReplyTo its response stream, Attempt from 1) with XADD T:req[:lane] * e
// <envelope>, remembering the entry id; (3) reads its stream with
// XREADGROUP GROUP client <client> COUNT n BLOCK t NOACK STREAMS <stream> >
// and matches answers to calls by Response.ID; answers already read are
// trimmed with XTRIM MINID. Before sending it checks that the lane has a
// live worker (Worker.LiveAt) and, against a backlog figure refreshed each
// second (and before the first call after 10 s without one), that the
// queue is below its cap.
//
// A server reads T:req[:lane] with XREADGROUP GROUP workers <worker>. A
// unary request delivered for the first time and within its deadline runs
// at once: its delivery is its claim, and no state hash is written (the
// fast path). Its answer is written with the answer script, which adds the
// Response to ReplyTo with NOMKSTREAM (nothing is created for a caller
// that is gone) and XACKs and XDELs the request entry. The first attempt
// of an async request whose idempotency key is its request id (the
// caller chose none), never replayed, takes the fast path too (see Async
// requests). Any other entry (reclaimed, retried, replayed, keyed, past
// its deadline) goes through the begin script, which decides with the
// state hash whether it runs; its outcome is written by the complete
// script, fenced by the state's worker (a failure of a fast-path request
// counts an absent state as its worker's). An entry that takes the fast
// path and is taken over without a state hash may have run: it is run
// again only when the method is idempotent, else answered (or, async,
// dead-lettered) "outcome unknown".
//
// A caller whose deadline passes or whose context is cancelled runs the
// arbiter script: a request not yet delivered is deleted and marked
// TIMEOUT or CANCELLED (provably never run), a delivered one is marked
// (a worker that has not begun it skips it) and a cancel is published on
// {S}:cancel, a finished one is left alone. The caller reports the call
// "not executed" only when the mark won. It tells them apart without
// reading the request stream: XPENDING of the entry id (delivered: in the
// workers group's pending list; NOGROUP counts as not delivered, any
// other error fails the script) and, when not pending, XDEL of the entry,
// whose count says whether it was still queued. So a caller's ACL user
// needs no read of the request stream (`rpr acl caller`).
//
// The script also returns, with a mark it won or a TIMEOUT or CANCELLED
// it found, the term of the master that ran it: run_id from INFO server
// and master_replid from INFO replication, joined by "/" ("?" when the
// ACL refuses INFO). Each refresh of a service reads the same term of
// each shard's master (a script of its own). The caller reports "not
// executed" only when the arbiter's term is the one it last saw before
// it sent the request: after a restart or a failover the master may lack
// the record of a worker taking the request, since Redis replicates
// asynchronously, and the caller reports the outcome unknown.
//
// # The state hash (T:st:<id>)
//
// For a unary call <id> is the request id, for an async request its
// idempotency key (the request id unless the caller chose one). Field
// StateField holds one of StateProcessing, StateSuccess, StateFailed,
// StateTimeout, StateCancelled, StateDead; the other fields are listed
// at StateWorker. Whoever moves the state out of absent first wins.
// PROCESSING carries the worker and a lease (Redis ms) the worker renews
// every third of it; a request whose lease lapsed and whose worker has not
// beaten for the silence is taken over by another worker (XAUTOCLAIM
// after a lease of idleness): run again only when the method is
// idempotent, else answered ABORTED "outcome unknown". A finished request
// keeps its Response in StateResponse until the state expires, so a
// duplicate delivery is answered from it instead of run again.
//
// # Async requests
//
// An async Request has Kind KindAsync, no ReplyTo and no Deadline; Timeout
// bounds each attempt and Retry may carry the caller's retry policy. It is
// queued by the enqueue script, which refuses it when the queue (stream
// plus retry set) is at its cap, or put in T:retry[:lane] when it is due
// later. A failed attempt is put back in the retry set with Attempt + 1
// after its backoff; the move-due script brings due entries to the stream.
// After the last attempt, or on a permanent error, the original envelope
// goes to T:dlq with the DeadLetter fields (DL*) and the state becomes
// DEAD. A success leaves the state SUCCESS for the idempotency window, so
// another request with the key is not run again. On the fast path (no
// claim in the state while it runs) the done script writes that marker
// (StateField SUCCESS, StateDoneMs, StateWorker, StateAttempt) with HSET
// and PEXPIRE and retires the entry, unfenced: a worker cut off from Redis
// past its lease whose request was taken over still records the success,
// and the taker's completion is then fenced.
//
// Servers keep each T:dlq under a cap (their worker records announce it as
// max_dead_letters) and never trim it. A dead letter for a T:dlq at the cap
// is held: the request is put back in the retry set with Attempt + 1, its
// state FAILED with the letter's fields in StateHeld; a worker that reads
// it again dead-letters it with those fields (or holds it again) and never
// runs it. An entry that cannot be decoded stays pending in the request
// stream until T:dlq has room.
//
// # Streams
//
// A streaming call is opened by a Request of Kind KindStream and Version
// StreamVersion in the request stream, like a unary call: ReplyTo is the
// caller's response stream, Deadline bounds the wait for a worker,
// StreamDeadline the stream itself, Streams says which sides stream,
// Window/WindowBytes is the caller's flow-control grant, and the open may
// carry the caller's first message (Messages, Payload) and its close
// (Closed). A worker claims it with the begin script (never as a rerun:
// a stream is never run twice), then accepts it with the accept script,
// which retires the open's entry and writes a FrameAccept to the caller;
// from then on the stream belongs to that worker. Frames (see
// FrameAccept) go to the caller's response stream and to the worker's
// inbox, {tag}:in:<worker>, a sender's queued frames back to back in one
// entry (StreamField) written with XADD NOMKSTREAM, so a receiver that is
// gone gets nothing created for it. The worker is its inbox's only
// reader: it reads with XREAD after the last entry it handled, removes
// handled entries with XTRIM MINID, and keeps the inbox alive (60 s TTL,
// renewed every 15 s; the open-inbox script). The stream ends with
// the server's Response on the caller's response stream (the end-stream
// script), after every frame before it.
//
// A worker takes a caller as gone when the caller's response stream has
// less than 54 s of its 60 s TTL left (it is renewed every second), and
// ends its streams; a caller takes a worker as gone when its record in
// {S}:workers is not live (LiveWindow). Either way the stream breaks:
// neither side runs it again, and the caller is told how many messages it
// received. Frames written to a Redis master but not yet replicated when
// it fails over are lost with it; the receiver sees the gap in Seq and
// breaks the stream with DATA_LOSS rather than skip them. With a single
// Redis and appendfsync always, a restart loses nothing.
//
// # Workers, routes, limits, schema
//
// Every server beats every BeatInterval into {S}:workers (and T:workers of
// each shard it reads) with a Worker record stamped with Redis's time; a
// worker is live for LiveWindow after its beat. Callers route a call by
// the RouteTable in {S}:routes and count it against every LimitRule in
// {S}:limits that applies to it (one script run on Redis's clock). Servers
// publish their service's schema, a FileDescriptorSet of the file that
// defines it and everything it imports (the defining file with its
// comments as source_code_info, when the generated code carries them),
// into the hash {S}:schemas under
// its SchemaID, which their Worker record names with the methods they
// serve (and, for tools of earlier releases, at {S}:schema). Each beat
// keeps {S}:workers and {S}:schemas for Retention and says whether the
// worker's schema is still there, so a worker publishes it again after
// Redis lost it.
//
// In a rolling deploy a worker may read a request for a method it does not
// serve. While a live worker of its lane and shard lists the method, it
// hands the entry over instead of answering UNIMPLEMENTED: the handoff
// script moves the entry into that worker's pending entries (XCLAIM, same
// id) and publishes a Handoff on {S}:handoff; the worker reads the entry by
// id and runs it. A worker of an earlier release (no Methods in its
// record) is never handed anything.
//
// # Status codes
//
// Response.Code is gRPC's number for the status (CodeName gives the
// names); 0 is OK, and only then is Payload the reply. Details are
// marshalled google.protobuf.Any messages.
//
// # Authenticated callers
//
// A caller with a secret (at least 32 random bytes) shared with the
// servers writes SignedVersion envelopes: Request.Caller names it and
// Request.Sig is HMAC-SHA256 under the signing key, HMAC-SHA256(secret,
// "rpr/v3 sign"), of this canonical encoding (signedRequest): each string
// and byte string as a uvarint length and its bytes (a byte string after
// a 0 for nil or a 1), each integer as a zig-zag varint, in this order —
// "rpr/v3 request", v, id, m, dl, r, t, k, ik (empty when it is the id),
// to, the retry policy (0, or 1 then n, i, x, the IEEE-754 bits of m, the
// count of c and each code), sk, sw, sb, sd, sn, sc (0 or 1), ca, then 1
// and sx for a sealed request, or 0, h and p: metadata as the count of
// names, then each name in byte order with the count of its values (-1
// for nil) and the values. Attempt and Replays are left out, as servers
// change them. A server's Response to such a request is SignedVersion,
// its Sig over "rpr/v3 response", v, id, c, then 1 and sx, or 0, msg, the
// count of x and each, h, tr, p, rf. A cancel of a signed request is
// published as "id caller hex(HMAC(signing key, "rpr/v3 cancel", service,
// id))". Sealing uses AES-256-GCM under HMAC-SHA256(secret, "rpr/v3
// seal"): Request.Sealed is nonce (12 bytes) || ciphertext of the msgpack
// map {h, p}, with "rpr/v3 sealed request\x00" + id as additional data;
// Response.Sealed seals the map of msg, x, h, tr, p, rf ("rpr/v3 sealed
// response\x00" + id). A sealed envelope carries none of those in the
// clear. A signed async request's state hash is named by
// Request.StateName: "caller/key" for a key the caller chose.
//
// # Versions
//
// Unary and async calls are wire Version 1, unchanged since the first
// release, so old and new peers serve each other. Streams are
// StreamVersion 2: their opens and frames, and the response that refuses
// a stream (Response.Refused); a Version 1 server refuses a stream open
// with a VersionError answer, which the caller reports as
// FAILED_PRECONDITION. Envelopes of authenticated callers are
// SignedVersion 3, for every kind; a server of an earlier release refuses
// them the same way, and a server of this one without ServerOptions.Trust
// refuses them with FAILED_PRECONDITION. A change to what an envelope, a key or a script
// means gets a new version; peers refuse envelopes of versions they do
// not speak, with an error that names both, rather than guess.
package wire
