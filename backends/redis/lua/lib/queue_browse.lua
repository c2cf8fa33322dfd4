-- lib/queue_browse.lua defines browse(out, id, rec, cut, part, exp), what
-- the queue browser's readers return for one job (queueBrowseFields): the
-- fields of lib/queue_partial.lua's partial (included before this file),
-- the partition replaced by part when given (the ready set that holds the
-- job), then exp, the lease deadline µs (0 unless in flight).
local function browse(out, id, rec, cut, part, exp)
  local n = #out
  partial(out, id, rec, cut)
  if part then out[n + 2] = part end
  out[#out + 1] = exp or 0
end
