// Package bufpool keeps byte buffers for reuse, in size classes, so that
// marshalling a message of any size takes a buffer near its size instead
// of allocating one for each call.
//
// It is written by hand because none of the pools that install here
// (gRPC-go's mem package among them) may enter the runtime's
// dependencies, and what is needed is small: size classes a quarter of a
// power of two apart over sync.Pool, each buffer owned by one caller
// between Get and Put, and a bounded few large buffers kept where no
// garbage collection takes them (sync.Pool alone kept missing for
// 1 MiB messages).
package bufpool
