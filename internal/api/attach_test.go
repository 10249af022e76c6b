package api

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestFramesRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	for _, f := range []struct {
		kind byte
		p    string
	}{{FrameData, "hello\r\n"}, {FrameSignal, "INT"}, {FrameData, ""}, {FrameData, strings.Repeat("x", MaxFrame)}} {
		if err := WriteFrame(&buf, f.kind, []byte(f.p)); err != nil {
			t.Fatal(err)
		}
		kind, p, err := ReadFrame(&buf)
		if err != nil || kind != f.kind || string(p) != f.p {
			t.Errorf("frame %c of %d bytes came back as %c of %d bytes, %v", f.kind, len(f.p), kind, len(p), err)
		}
	}
	if err := WriteFrame(&buf, FrameData, make([]byte, MaxFrame+1)); err == nil {
		t.Error("a frame over MaxFrame was written")
	}
	// A length over the limit, or zero, is refused before anything is allocated.
	for _, hdr := range [][]byte{{0xff, 0xff, 0xff, 0xff}, {0, 0, 0, 0}} {
		if _, _, err := ReadFrame(bytes.NewReader(hdr)); err == nil {
			t.Errorf("header %x was accepted", hdr)
		}
	}
	// A cut frame is an error, not a short payload.
	if _, _, err := ReadFrame(bytes.NewReader([]byte{0, 0, 0, 5, 'd', 'a'})); err != io.ErrUnexpectedEOF {
		t.Errorf("a cut frame: %v; want io.ErrUnexpectedEOF", err)
	}
}

func TestResizeFrame(t *testing.T) {
	f := ResizeFrame(50, 200)
	if f[0] != FrameResize {
		t.Fatalf("kind %c", f[0])
	}
	rows, cols, err := ParseResize(f[1:])
	if err != nil || rows != 50 || cols != 200 {
		t.Errorf("got %d x %d, %v; want 50 x 200", rows, cols, err)
	}
	for _, bad := range [][]byte{{0, 0, 0, 80}, {0, 24, 0, 0}, {0, 24, 0}, nil} {
		if _, _, err := ParseResize(bad); err == nil {
			t.Errorf("resize payload %x was accepted", bad)
		}
	}
}
