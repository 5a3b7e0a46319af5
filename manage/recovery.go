package manage

// confirmLoss is the transition that checks, with one Info call, whether the
// sandbox behind l is lost after an operation under l failed with cause (an
// error that could mean a loss). A gone or stopped sandbox is a confirmed
// loss: replaceLost handles it, and what it returns (a *LostError, or why
// replacing could not even start) is left in *result once the flight is
// done. An inconclusive or negative check changes nothing and leaves
// *result nil; the flight itself never fails, so operations waiting for it
// carry on.
func (m *Manager) confirmLoss(l *Lease, cause error, result *error) transition {
	return func(ws *workspace, f *flight, epoch uint64) error {
		ctx, cancel := m.callCtx()
		info, err := m.opts.Provider.Info(ctx, l.Sandbox.ID)
		cancel()
		if err != nil {
			m.log.Warn("could not confirm a suspected sandbox loss; reporting the original error", "key", ws.key, "sandbox", l.Sandbox.ID, "err", err, "suspect", cause)
			return nil
		}
		if info.State == StatePaused {
			m.pausedBehindBack(ws, epoch, l.Generation)
			return nil
		}
		if info.State != StateGone && info.State != StateStopped {
			return nil
		}
		*result = m.replaceLost(ws, f, epoch, l.Generation, info, cause, neverRan(cause, info.EndedAt, l.acquired))
		return nil
	}
}

// pausedBehindBack records that generation gen's sandbox, published as
// running, was found paused by someone else (a provider that pauses
// sandboxes whose time to live ran out, as E2B does): not a loss, but the
// next operation resumes it.
func (m *Manager) pausedBehindBack(ws *workspace, epoch uint64, gen int64) {
	ws.mu.Lock()
	if ws.epoch != epoch || ws.gen != gen || ws.sb == nil || ws.state != StateRunning {
		ws.mu.Unlock()
		return
	}
	ws.state = StatePaused
	rec := m.record(ws)
	ws.mu.Unlock()
	m.log.Info("sandbox was paused outside this server; the next call resumes it", "key", ws.key, "sandbox", rec.SandboxID)
	m.save(rec)
}

// replaceLost handles a confirmed loss of generation gen: with AutoRecreate
// it publishes a replacement (a restart of a stopped sandbox keeps its
// files); the returned *LostError reports it either way.
func (m *Manager) replaceLost(ws *workspace, f *flight, epoch uint64, gen int64, info Sandbox, cause error, notRun bool) error {
	lost := &LostError{Key: ws.key, PrevGeneration: gen, State: info.State, Detail: info.Detail, NotRun: notRun, Cause: cause, endedAt: info.EndedAt}
	if lost.Detail == "" {
		lost.Detail = string(info.State)
	}
	m.log.Warn("sandbox lost", "key", ws.key, "sandbox", info.ID, "generation", gen, "state", info.State, "detail", lost.Detail)
	if !m.opts.AutoRecreate {
		ws.mu.Lock()
		if ws.epoch == epoch {
			ws.loaded = true
			ws.lost = lost
		}
		ws.mu.Unlock()
		return lost
	}
	m.recreations.Add(1)
	if info.State == StateStopped && info.ID != "" {
		ctx, cancel := m.callCtx()
		defer cancel()
		err := m.opts.Provider.Resume(ctx, info.ID)
		if err == nil {
			lost.FilesKept = true
			info.State = StateRunning
			return m.publish(ws, f, epoch, info, gen+1, EventRecreated, lost, true)
		}
		m.log.Warn("could not restart stopped sandbox; creating a new one", "sandbox", info.ID, "err", err)
		m.killQuietly(info.ID)
	}
	return m.create(ws, f, epoch, gen+1, EventRecreated, lost)
}
