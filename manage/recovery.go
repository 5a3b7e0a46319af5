package manage

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
