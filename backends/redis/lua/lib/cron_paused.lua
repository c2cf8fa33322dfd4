-- lib/cron_paused.lua defines defPaused(def): whether a definition says
-- paused: true. The definition is canonical JSON written by coordd, so
-- the plain search finds the field when it is there (in a string value a
-- quote is escaped); cjson then confirms it.
local function defPaused(def)
  if not string.find(def, '"paused":true', 1, true) then return false end
  return cjson.decode(def).paused == true
end
