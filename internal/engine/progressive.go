package engine

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// progressive reports whether an upstream answer is media to journal as it
// arrives (raw audio from the speech endpoint), not a whole body read to
// its end first: a request that asked for no event stream, answered 200
// with an audio/* body. Its readers follow the body's chunks live and can
// start at a byte offset while it is still being generated.
func progressive(stream bool, status int, contentType string) bool {
	if stream || status != http.StatusOK {
		return false
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	return strings.HasPrefix(mt, "audio/")
}

// media journals a progressive upstream body chunk by chunk as it arrives.
// The initiating client is answered at once (Head.Progressive) and follows
// the tail, as every reader on this instance does. A body cut before its
// end, or longer than MaxResult, is no result: an error event follows the
// chunks, so readers end their responses broken rather than complete.
func (p *pump) media(ctx context.Context, w *journal.Writer, resp *http.Response, ct string, attempts int) resume.Result {
	p.answer(&Head{
		Status: resp.StatusCode, ContentType: ct, Progressive: true, Length: resp.ContentLength,
		Attempts: attempts, Upstream: p.up.Name,
	})
	maxResult := p.e.cfg.Limits.MaxResult
	size := max(min(chunkSize, p.e.cfg.Journal.MaxEventSize()-len(TypeBody)), 1) // each chunk one message
	buf := make([]byte, size)
	var total int64
	fail := func(e apierr.Error) resume.Result {
		_ = w.AppendFinal(context.WithoutCancel(ctx), TypeError, e.BodyIn(p.shape()))
		return resume.Result{State: resume.Failed, Status: resp.StatusCode, ContentType: ct, Error: e.Code}
	}
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if herr := p.held(ctx); herr != nil { // held.go: the lease ran out
				if e, ok := heldError(herr); ok {
					return fail(e)
				}
				return fail(apierr.New(p.stopCode(ctx)))
			}
			total += int64(n)
			if total > maxResult {
				return fail(apierr.New(apierr.UpstreamBody))
			}
			if aerr := w.Append(ctx, TypeBody, append([]byte(nil), buf[:n]...)); aerr != nil {
				return fail(apierr.New(apierr.JournalFailure))
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			if resp.ContentLength >= 0 && total != resp.ContentLength {
				return fail(apierr.New(classify.CodeInterrupted).WithMessage("the upstream's audio ended before its Content-Length; no result was stored"))
			}
			return resume.Result{State: resume.Completed, Status: resp.StatusCode, ContentType: ct}
		case err != nil:
			if ctx.Err() != nil {
				return fail(apierr.New(p.stopCode(ctx)))
			}
			p.log.Warn("upstream audio ended before its end", "bytes", total, "err", err)
			return fail(upstreamError(classify.Interrupted(err)))
		}
	}
}
