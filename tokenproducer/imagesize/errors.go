package imagesize

import "fmt"

// ErrorKind classifies why a size could not be read.
type ErrorKind string

const (
	// KindBadURL: the data URL is not of the form data:[<media type>][;base64],<data>.
	KindBadURL ErrorKind = "bad_url"
	// KindBadBase64: the payload is not valid base64.
	KindBadBase64 ErrorKind = "bad_base64"
	// KindUnknownFormat: the bytes are not PNG, JPEG, GIF or WebP.
	KindUnknownFormat ErrorKind = "unknown_format"
	// KindTruncated: the data ends inside the header.
	KindTruncated ErrorKind = "truncated"
	// KindCorrupt: the header is structurally invalid.
	KindCorrupt ErrorKind = "corrupt"
	// KindTooLarge: the size is zero, over Limits.MaxSide or over Limits.MaxPixels,
	// or the header was not found within Limits.MaxHeaderBytes.
	KindTooLarge ErrorKind = "too_large"
)

// Error is a precise reason why an image's size could not be read.
type Error struct {
	Kind   ErrorKind
	Format string // "png", "jpeg", "gif", "webp" once known
	Msg    string
}

func (e *Error) Error() string {
	if e.Format != "" {
		return e.Format + ": " + e.Msg
	}
	return e.Msg
}

func errorf(kind ErrorKind, format string, msg string, args ...any) *Error {
	return &Error{Kind: kind, Format: format, Msg: fmt.Sprintf(msg, args...)}
}
