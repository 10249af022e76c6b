package server

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rotahq/rota/internal/api"
)

// The job logs agents ship are the one thing that grows without bound on the server's
// disk (--max-log-size bounds each rank's, not how many there are; --log-retention is off
// by default), and a SQLite store shares that disk: filled by logs, the store could take
// no more commits, and every submit and every report of a job's end would fail. So the
// server keeps room for its store: once the data dir's disk has less free than
// Config.KeepFreeDisk, it takes no more log bytes. Agents keep what they could not ship
// and send it again later (a refused chunk is retried), so nothing is lost while there is
// room on the nodes, and the logs catch up once an operator frees space here.

// DefaultKeepFreeDisk is Config.KeepFreeDisk's default: 1 GiB.
const DefaultKeepFreeDisk = 1 << 30

// diskRoomEvery is how often the room on the data dir's disk is read again while logs
// are written; what is written meanwhile is taken from the last reading.
const diskRoomEvery = time.Second

// diskRoom says whether the data dir's disk has room for more log bytes.
type diskRoom struct {
	dir  string
	keep int64 // <= 0: nothing is kept, and logs are never refused for room
	log  *slog.Logger
	// freeOf reads the bytes free to the server on dir's file system (statfsFree), and
	// now is the server's clock.
	freeOf func(dir string) (int64, error)
	now    func() time.Time

	mu    sync.Mutex
	read  time.Time // when free was read from the disk
	free  int64     // as read, less what was taken since
	short bool      // logs are refused: set by take and refusing, said when it changes
}

// statfsFree is the bytes an unprivileged writer may still use on dir's file system.
func statfsFree(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// take reports whether n more bytes of logs may be written, counting them as written
// until the next reading. A disk that cannot be read is taken to have room: the write
// itself will say what is wrong.
func (d *diskRoom) take(n int64) *api.Error {
	if d.keep <= 0 || n <= 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// A reading is also taken where this write would cross the line, so that a count
	// that ran ahead of the disk (bytes that replaced others) refuses nothing; while logs
	// are refused, once every diskRoomEvery is enough.
	if _, err := d.readLocked(!d.short && d.free-n < d.keep); err != nil {
		return nil
	}
	if d.setShortLocked(d.free-n < d.keep) {
		return &api.Error{Code: api.CodeDiskFull, Message: d.message()}
	}
	d.free -= n
	return nil
}

// readLocked reads the disk's room again if the last reading is diskRoomEvery old, or
// if now, and reports whether it did. Callers hold d.mu.
func (d *diskRoom) readLocked(now bool) (bool, error) {
	t := d.now()
	if !now && !d.read.IsZero() && t.Sub(d.read) < diskRoomEvery {
		return false, nil
	}
	free, err := d.freeOf(d.dir)
	if err != nil {
		return false, err
	}
	d.read, d.free = t, free
	return true, nil
}

// setShortLocked records whether logs are refused, saying so in the server's log when
// that changes, and returns short. Callers hold d.mu.
func (d *diskRoom) setShortLocked(short bool) bool {
	if short == d.short {
		return short
	}
	d.short = short
	if short {
		d.log.Warn("the server's disk is nearly full: it takes no more job logs, which wait on their nodes, until there is room",
			"data_dir", d.dir, "free", roomText(d.free), "keep_free", api.SizeText(d.keep))
	} else {
		d.log.Info("room again on the server's disk: it takes job logs again", "data_dir", d.dir, "free", roomText(d.free))
	}
	return short
}

// message says why logs are refused. Callers hold d.mu.
func (d *diskRoom) message() string {
	return fmt.Sprintf("the server's disk is nearly full: its data dir %s has %s free, and the server keeps %s free for its store (rota server --keep-free-disk)",
		d.dir, roomText(d.free), api.SizeText(d.keep))
}

// refusing reads the disk's room if the last reading is old, and reports whether logs
// are refused. Below the line they are; a chunk's worth above it they are taken again
// (take also decides, for each write, whether it fits).
func (d *diskRoom) refusing() bool {
	if d.keep <= 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if read, err := d.readLocked(false); err == nil && read {
		switch {
		case d.free < d.keep:
			d.setShortLocked(true)
		case d.free >= d.keep+maxLogChunk:
			d.setShortLocked(false)
		}
	}
	return d.short
}

// problem is what rota admin status shows while logs are refused, or "".
func (d *diskRoom) problem() string {
	if !d.refusing() {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.message() + "; job logs wait on their nodes until there is room"
}

// heldBack says, to a reader of a log of node, that what the node printed lately waits
// there for room on this server's disk; "" while there is room.
func (d *diskRoom) heldBack(node string) string {
	if !d.refusing() {
		return ""
	}
	return fmt.Sprintf("this server's disk is nearly full (rota admin status says more), so it takes no more logs: what node %s printed lately waits there until there is room", node)
}

// freeNow is the free bytes on the data dir's disk for /metrics, read again where the
// last reading is diskRoomEvery old; -1 where it cannot be read.
func (d *diskRoom) freeNow() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.readLocked(false); err != nil || d.read.IsZero() {
		return -1
	}
	return float64(d.free)
}

// roomText is a disk's free bytes as a person reads them: in GiB to a tenth, in whole
// MiB, or in bytes below one.
func roomText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", max(n, 0))
}
