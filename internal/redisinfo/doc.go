// Package redisinfo reads the counters a redis-server reports in INFO —
// commands executed, CPU time and memory — so that every benchmark and
// memory test measures Redis the same way.
package redisinfo
