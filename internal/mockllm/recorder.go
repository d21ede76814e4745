package mockllm

// recorder books the progress of one generation into the ledger.
type recorder struct {
	l     *Ledger
	epoch uint64
	log   *promptLog
	gen   *generation
	done  bool // guarded by l.mu
}

// begin books a new generation for prompt.
func (l *Ledger) begin(prompt, path string) *recorder {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.logLocked(prompt)
	g := &generation{Generation: Generation{Prompt: prompt, Path: path}}
	p.gens = append(p.gens, g)
	p.entry.Generations++
	l.total.Generations++
	l.notifyLocked()
	return &recorder{l: l, epoch: l.epoch, log: p, gen: g}
}

// live reports whether the recorder still books into the ledger. l.mu must be held.
func (r *recorder) live() bool { return r.epoch == r.l.epoch && !r.done }

// progress books events written, tokens generated and content bytes.
func (r *recorder) progress(events, tokens int, content []byte) {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if !r.live() {
		return
	}
	r.gen.Events += events
	r.gen.Tokens += tokens
	r.gen.content = append(r.gen.content, content...)
	r.log.entry.Tokens += tokens
	r.l.total.Tokens += tokens
	r.l.notifyLocked()
}

// prompt books the generation's prompt tokens.
func (r *recorder) prompt(tokens int) {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if !r.live() {
		return
	}
	r.gen.PromptTokens += tokens
	r.l.notifyLocked()
}

// complete marks the generation as ended normally.
func (r *recorder) complete() { r.finish(true) }

// abort marks the generation as ended abnormally unless it already ended.
func (r *recorder) abort() { r.finish(false) }

func (r *recorder) finish(completed bool) {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if !r.live() {
		r.done = true
		return
	}
	r.done = true
	if completed {
		r.gen.Completed = true
		r.log.entry.Completed++
		r.l.total.Completed++
	} else {
		r.gen.Aborted = true
	}
	r.l.notifyLocked()
}
