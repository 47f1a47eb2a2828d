-- wrk script: Put Message signed with SharedKey, as azq-loadgen signs it with --message-bytes
-- 128: the request is re-signed once a second (x-ms-date changes) and reused within the
-- second, as azq-loadgen's encoder does. HMAC-SHA256 and base64 are written here in LuaJIT's
-- bit operations, since wrk has no crypto library. scripts/bench-vs-wrk.sh runs it with the
-- queue path and the development account; env: AZQ_ACCOUNT, AZQ_KEY (base64), AZQ_PATH.
local bit = require("bit")
local band, bor, bxor, bnot = bit.band, bit.bor, bit.bxor, bit.bnot
local rshift, lshift, ror, tobit = bit.rshift, bit.lshift, bit.ror, bit.tobit

local K = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

-- SHA-256 of a byte string, as a 32-byte string.
local function sha256(message)
  local length = #message
  local padding = (55 - length) % 64
  local bits = length * 8
  message = message .. "\128" .. string.rep("\0", padding + 4)
    .. string.char(band(rshift(bits, 24), 255), band(rshift(bits, 16), 255),
                   band(rshift(bits, 8), 255), band(bits, 255))
  local h = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
              0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 }
  local w = {}
  for chunk = 1, #message, 64 do
    for i = 0, 15 do
      local a, b, c, d = message:byte(chunk + 4 * i, chunk + 4 * i + 3)
      w[i] = bor(lshift(a, 24), lshift(b, 16), lshift(c, 8), d)
    end
    for i = 16, 63 do
      local s0 = bxor(ror(w[i - 15], 7), ror(w[i - 15], 18), rshift(w[i - 15], 3))
      local s1 = bxor(ror(w[i - 2], 17), ror(w[i - 2], 19), rshift(w[i - 2], 10))
      w[i] = tobit(w[i - 16] + s0 + w[i - 7] + s1)
    end
    local a, b, c, d, e, f, g, hh = h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8]
    for i = 0, 63 do
      local s1 = bxor(ror(e, 6), ror(e, 11), ror(e, 25))
      local choice = bxor(band(e, f), band(bnot(e), g))
      local t1 = tobit(hh + s1 + choice + K[i + 1] + w[i])
      local s0 = bxor(ror(a, 2), ror(a, 13), ror(a, 22))
      local majority = bxor(band(a, b), band(a, c), band(b, c))
      local t2 = tobit(s0 + majority)
      hh, g, f, e, d, c, b, a = g, f, e, tobit(d + t1), c, b, a, tobit(t1 + t2)
    end
    h[1], h[2], h[3], h[4] = tobit(h[1] + a), tobit(h[2] + b), tobit(h[3] + c), tobit(h[4] + d)
    h[5], h[6], h[7], h[8] = tobit(h[5] + e), tobit(h[6] + f), tobit(h[7] + g), tobit(h[8] + hh)
  end
  local out = {}
  for i = 1, 8 do
    local v = h[i]
    out[i] = string.char(band(rshift(v, 24), 255), band(rshift(v, 16), 255),
                         band(rshift(v, 8), 255), band(v, 255))
  end
  return table.concat(out)
end

local function hmac_sha256(key, message)
  if #key > 64 then key = sha256(key) end
  key = key .. string.rep("\0", 64 - #key)
  local inner, outer = {}, {}
  for i = 1, 64 do
    local byte = key:byte(i)
    inner[i] = string.char(bxor(byte, 0x36))
    outer[i] = string.char(bxor(byte, 0x5c))
  end
  return sha256(table.concat(outer) .. sha256(table.concat(inner) .. message))
end

local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

local function base64_encode(data)
  local out = {}
  for i = 1, #data, 3 do
    local a, b, c = data:byte(i, i + 2)
    local n = lshift(a, 16) + lshift(b or 0, 8) + (c or 0)
    local chars = 4 - (b and 0 or 1) - (c and 0 or 1)
    for j = 1, 4 do
      if j <= chars then
        local index = band(rshift(n, 6 * (4 - j)), 63) + 1
        out[#out + 1] = ALPHABET:sub(index, index)
      else
        out[#out + 1] = "="
      end
    end
  end
  return table.concat(out)
end

local function base64_decode(text)
  local values = {}
  for i = 1, 64 do values[ALPHABET:byte(i)] = i - 1 end
  local out, n, bits = {}, 0, 0
  for i = 1, #text do
    local value = values[text:byte(i)]
    if value then
      n = lshift(n, 6) + value
      bits = bits + 6
      if bits >= 8 then
        bits = bits - 8
        out[#out + 1] = string.char(band(rshift(n, bits), 255))
      end
    end
  end
  return table.concat(out)
end

local account = os.getenv("AZQ_ACCOUNT") or "devstoreaccount1"
local key = base64_decode(os.getenv("AZQ_KEY") or
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==")
local path = os.getenv("AZQ_PATH") or ("/" .. account .. "/bench-0/messages")
local version = "2021-12-02"
local text = "1795305600000000" .. string.rep("x", 128 - 16)
local body = "<QueueMessage><MessageText>" .. text .. "</MessageText></QueueMessage>"

local signed_second, signed_request = -1, nil

-- The request for the current second: dated and signed once, then reused.
function request()
  local now = os.time()
  if now ~= signed_second then
    local date = os.date("!%a, %d %b %Y %H:%M:%S GMT", now)
    local to_sign = "POST\n\n\n" .. #body .. "\n\napplication/xml\n\n\n\n\n\n\n"
      .. "x-ms-date:" .. date .. "\nx-ms-version:" .. version .. "\n"
      .. "/" .. account .. path
    local signature = base64_encode(hmac_sha256(key, to_sign))
    signed_request = wrk.format("POST", path, {
      ["Content-Type"] = "application/xml",
      ["x-ms-version"] = version,
      ["x-ms-date"] = date,
      ["Authorization"] = "SharedKey " .. account .. ":" .. signature,
    }, body)
    signed_second = now
  end
  return signed_request
end
