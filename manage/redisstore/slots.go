package redisstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// reserveScript admits a slot (see the package comment). KEYS[1] is the
// owner's slots set; ARGV: the key, the limit, the expiry in milliseconds,
// the record key prefix, then the owner's keys List found holding a slot.
// It returns {1, held, token} when admitted (token: the reservation's
// score) or {0, held} when the owner is full.
var reserveScript = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 5, #ARGV do
  redis.call("ZADD", KEYS[1], "NX", 0, ARGV[i])
end
local function holds(k)
  local raw = redis.call("GET", ARGV[4] .. k)
  if not raw then return false end
  local ok, rec = pcall(cjson.decode, raw)
  if not ok or type(rec) ~= "table" then return false end
  local id = rec["sandbox_id"]
  return type(id) == "string" and id ~= "" and rec["state"] ~= "gone"
end
local members = redis.call("ZRANGE", KEYS[1], 0, -1, "WITHSCORES")
local held, mine = 0, false
for i = 1, #members, 2 do
  local k, score = members[i], tonumber(members[i + 1])
  if score > now or holds(k) then
    held = held + 1
    if k == ARGV[1] then mine = true end
  else
    redis.call("ZREM", KEYS[1], k)
  end
end
if not mine and held >= tonumber(ARGV[2]) then
  return {0, held}
end
if not mine then held = held + 1 end
local expires = now + tonumber(ARGV[3])
redis.call("ZADD", KEYS[1], expires, ARGV[1])
return {1, held, tostring(expires)}
`)

// releaseSlotScript gives a reservation back: KEYS[1] is the owner's slots
// set, ARGV[1] the key and ARGV[2] the reservation's token (its score). A
// later reservation of the key (another score) is left alone.
var releaseSlotScript = redis.NewScript(`
if tonumber(redis.call("ZSCORE", KEYS[1], ARGV[1])) == tonumber(ARGV[2]) then
  redis.call("ZADD", KEYS[1], "XX", 0, ARGV[1])
end
return 0
`)

// ReserveSlot implements manage.Store (see Slots in the package comment).
func (s *Store) ReserveSlot(ctx context.Context, req manage.SlotRequest) (func(), error) {
	recs, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	args := []any{req.Key, req.Max, max(req.Expiry.Milliseconds(), 1), s.recordKey("")}
	for _, rec := range recs {
		if rec.HoldsSlot() && req.OwnerOf(rec.Key) == req.Owner {
			args = append(args, rec.Key)
		}
	}
	sk := s.slotsKey(req.Owner)
	cctx, cancel := s.cmdCtx(ctx)
	res, err := reserveScript.Run(cctx, s.rdb, []string{sk}, args...).Slice()
	cancel()
	if err != nil {
		return nil, s.fault(ctx, "reserving a sandbox slot", err)
	}
	if len(res) < 2 {
		return nil, fmt.Errorf("redis store at %s: reserving a sandbox slot: unexpected reply %v", s.addr, res)
	}
	held, _ := res[1].(int64)
	if admitted, _ := res[0].(int64); admitted != 1 || len(res) < 3 {
		return nil, &manage.LimitError{Owner: req.Owner, Max: req.Max, Held: int(held)}
	}
	token, _ := res[2].(string)
	var once sync.Once
	return func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommandTimeout)
			defer cancel()
			if err := releaseSlotScript.Run(ctx, s.rdb, []string{sk}, req.Key, token).Err(); err != nil {
				s.log.Warn("could not release a sandbox slot reservation; it lapses by itself", "key", req.Key, "expiry", req.Expiry, "err", s.fault(context.Background(), "releasing a sandbox slot", err))
			}
		})
	}, nil
}
