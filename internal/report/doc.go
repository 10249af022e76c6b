// Package report is rota's accounting: what each attempt of each job held and used,
// and the usage reports and the monthly review pack built from that.
//
// The accounting is pure. It reads a copy of the server's records (jobs, attempts, the
// checkpoint and preempt events, node inventories, prices) handed over in an Input, and
// the time "now" comes in with them: nothing here reads a clock, the network or the
// server's state, so the server can take its copy under its lock, release the lock, and
// compute for as long as a report takes without delaying scheduling.
//
// The only I/O is WritePack, which writes a finished pack to a directory, and the
// writers, which print a report to an io.Writer.
package report
