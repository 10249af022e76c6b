package api

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Interactive jobs (JobSpec.TTY). The job's pseudo-terminal lives on its node; the agent
// holds one WebSocket to GET /api/v1/agents/{node}/attach/{job}/{attempt} while the
// attempt runs, the user's client holds one to GET /api/v1/jobs/{id}/attach, and the
// server pipes frames between them. Every WebSocket message is one binary frame: a kind
// byte, then its payload. Between the agent and the job's supervisor on the node the same
// frames travel on a Unix socket, each preceded by its length (WriteFrame, ReadFrame).

// Frame kinds.
const (
	// FrameData carries terminal bytes: keystrokes towards the job, output from it.
	FrameData byte = 'd'
	// FrameResize carries the terminal's size: rows then columns, two bytes each,
	// big-endian. The job sees it as its pty's window size and gets SIGWINCH.
	FrameResize byte = 'r'
	// FrameSignal carries a signal name (INT, TERM, QUIT, TSTP, CONT, HUP, USR1, USR2,
	// WINCH) to send to the job's process group.
	FrameSignal byte = 's'
)

// AttachSignals are the signals a client may send to an interactive job.
var AttachSignals = []string{"INT", "TERM", "QUIT", "TSTP", "CONT", "HUP", "USR1", "USR2", "WINCH"}

// MaxFrame bounds one frame's payload.
const MaxFrame = 64 << 10

// ResizeFrame encodes a window size.
func ResizeFrame(rows, cols uint16) []byte {
	b := []byte{FrameResize, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(b[1:], rows)
	binary.BigEndian.PutUint16(b[3:], cols)
	return b
}

// ParseResize decodes a resize frame's payload.
func ParseResize(p []byte) (rows, cols uint16, err error) {
	if len(p) != 4 {
		return 0, 0, fmt.Errorf("a resize frame holds 4 bytes, not %d", len(p))
	}
	rows, cols = binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
	if rows == 0 || cols == 0 {
		return 0, 0, errors.New("a window size has at least one row and one column")
	}
	return rows, cols, nil
}

// WriteFrame writes one frame to a stream: its length (4 bytes, big-endian, counting the
// kind byte), the kind, the payload.
func WriteFrame(w io.Writer, kind byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("frame of %d bytes is over the limit of %d", len(payload), MaxFrame)
	}
	b := make([]byte, 5+len(payload))
	binary.BigEndian.PutUint32(b, uint32(1+len(payload)))
	b[4] = kind
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

// ReadFrame reads one frame WriteFrame wrote.
func ReadFrame(r io.Reader) (kind byte, payload []byte, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 1 || n > MaxFrame+1 {
		return 0, nil, fmt.Errorf("bad frame length %d", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, err
	}
	return b[0], b[1:], nil
}
