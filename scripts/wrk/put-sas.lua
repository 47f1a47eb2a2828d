-- wrk script: Put Message with a SAS (the token is in the URL given to wrk), the same request
-- azq-loadgen sends with --sas --message-bytes 128: scripts/bench-vs-wrk.sh runs both.
-- The request never changes, so wrk formats it once.
local text = "1795305600000000" .. string.rep("x", 128 - 16)
wrk.method = "POST"
wrk.body = "<QueueMessage><MessageText>" .. text .. "</MessageText></QueueMessage>"
wrk.headers["Content-Type"] = "application/xml"
wrk.headers["x-ms-version"] = "2021-12-02"
