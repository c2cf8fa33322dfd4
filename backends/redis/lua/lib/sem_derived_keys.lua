-- lib/sem_derived_keys.lua opens the rare paths of the one-slot fast scripts,
-- which take only the lock (and the fencing counter): the other keys are
-- built from the lock's name ("<prefix>{sem:<name>}:lock"), in the same
-- hash slot.
local B = string.sub(K_LOCK, 1, -5)
local K_CFG, K_FREE, K_EXP, K_HOLD, K_WAKE, K_WSEQ, K_WEXP =
  B .. 'cfg', B .. 'free', B .. 'exp', B .. 'holders', B .. 'wake', B .. 'wseq', B .. 'wexp'
