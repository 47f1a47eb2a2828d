//! The machinery of answering, the second half of the request path: the status line and the
//! headers every response carries (`Server`, `x-ms-request-id`, `x-ms-version` echoed or the
//! latest, `x-ms-client-request-id`, `Date` from a per-second cache, `Connection`), errors in
//! Azure's XML, and the request's CORS headers last, once the others are known. Each operation's
//! own headers and body are written by its file in `ops/`; `Service::respond` (api/mod.rs)
//! dispatches to them.

use bytes::BytesMut;

use crate::auth::{bearer, bearer_token, AuthFailure};
use crate::error::{authentication_error_detail, StorageError};
use crate::http::response::Assembled;
use crate::http::{KnownHeader, Method, Request, ResponseWriter};
use crate::queue::Reply;
use crate::time;

/// The newest `x-ms-version` azq knows; sent back when a request names none.
pub const API_VERSION_LATEST: &str = "2026-10-06";

use super::{ids, xml, CorsHeaders};

/// The `Server` header value.
const SERVER: &str = concat!("azq/", env!("CARGO_PKG_VERSION"));
/// The head of every answer to a request starts with these headers; `x-ms-request-id`'s value,
/// its end of line and the `Date` line follow (`SERVER_AND_REQUEST_ID_BYTES`, `DATE_LINE_BYTES`).
const SERVER_AND_REQUEST_ID: &str = concat!(
    "Server: azq/",
    env!("CARGO_PKG_VERSION"),
    "\r\nx-ms-request-id: "
);
/// `SERVER_AND_REQUEST_ID`, the request ID and CRLF.
const SERVER_AND_REQUEST_ID_BYTES: usize = SERVER_AND_REQUEST_ID.len() + 36 + 2;
/// `Date: <RFC 1123 date>` and CRLF.
const DATE_LINE_BYTES: usize = "Date: ".len() + time::RFC1123_BYTES + 2;

/// Where a refused bearer token's challenge sends the client for a new one, before the tenant.
const CHALLENGE_AUTHORITY: &str = "Bearer authorization_uri=https://login.microsoftonline.com/";
/// The rest of the challenge after the tenant: the path and the resource to ask a token for.
const CHALLENGE_RESOURCE: &str = "/oauth2/authorize resource_id=https://storage.azure.com";
/// The tenant a challenge names when the refused token names none (it is not a JWT, or has
/// neither a `tid` nor an Azure AD issuer): a GUID, as clients follow only those.
const CHALLENGE_TENANT_UNKNOWN: &str = "00000000-0000-0000-0000-000000000000";

/// What an operation's response writer gives back: `Err` with the reply when the reply is not
/// one the operation can answer with (a bug; the client gets 500 `InternalError`).
pub(super) type Written = Result<(), Reply>;

/// Answers a request the HTTP layer could not parse (there is no `Request` to echo from).
pub(super) fn respond_unparsed(error: StorageError, now_ms: u64, out: &mut BytesMut) {
    let request_id = ids::hyphenated(ids::request_id());
    let mut writer = ResponseWriter::start_with_reason(out, error.status(), error.message(), false);
    writer.header("Server", SERVER.as_bytes());
    writer.header("x-ms-request-id", &request_id);
    writer.header("x-ms-version", API_VERSION_LATEST.as_bytes());
    writer.header("x-ms-error-code", error.code().as_bytes());
    writer.header("Date", &time::rfc1123_cached(now_ms));
    writer.header("Connection", b"close");
    writer.header("Content-Type", b"application/xml");
    xml::error(writer.body(), error, &request_id, now_ms, None);
    writer.finish();
}

/// The `WWW-Authenticate` challenge of a refused bearer token, in Azure's form: where to get a
/// token and for which resource. Azure names the account's tenant; an emulator's accounts have
/// none, so the challenge names the refused token's own tenant (a client re-asking there gets a
/// token it can use), else an all-zero GUID. The JavaScript SDK follows a challenge only when
/// it names a tenant GUID (`common`, which azq named before, is ignored).
fn bearer_challenge(authorization: Option<&[u8]>) -> String {
    let tenant = authorization
        .and_then(bearer_token)
        .and_then(bearer::identity)
        .and_then(|identity| identity.tenant_id)
        .filter(|tenant| bearer::is_guid(tenant))
        .unwrap_or_else(|| CHALLENGE_TENANT_UNKNOWN.to_string());
    format!("{CHALLENGE_AUTHORITY}{tenant}{CHALLENGE_RESOURCE}")
}

/// What every response to one request shares.
pub(super) struct Responder<'a> {
    request: &'a Request,
    request_id: [u8; 36],
    now_ms: u64,
    cors: Option<&'a CorsHeaders>,
}

impl<'a> Responder<'a> {
    /// The responder for one request, with a fresh request ID.
    pub fn new(request: &'a Request, now_ms: u64, cors: Option<&'a CorsHeaders>) -> Self {
        Responder {
            request,
            request_id: ids::hyphenated(ids::request_id()),
            now_ms,
            cors,
        }
    }

    /// The time the response is written, ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Writes the status line and the headers every response carries; the CORS ones follow
    /// when the head closes.
    pub fn start<'o>(&self, status: u16, out: &'o mut BytesMut) -> Response<'o, 'a> {
        let writer = ResponseWriter::start(out, status, self.request.method == Method::Head);
        self.common_headers(writer)
    }

    /// `start` with `reason` as the status line's reason phrase (an error's message).
    fn start_with_reason<'o>(
        &self,
        status: u16,
        reason: &str,
        out: &'o mut BytesMut,
    ) -> Response<'o, 'a> {
        let request = self.request;
        let writer =
            ResponseWriter::start_with_reason(out, status, reason, request.method == Method::Head);
        self.common_headers(writer)
    }

    /// Adds the headers every response carries after its status line. azq's own values (the
    /// server, the request ID, the date) are assembled into two lines copied in one piece each;
    /// the echoed ones are checked by `ResponseWriter::header`.
    fn common_headers<'o>(&self, mut writer: ResponseWriter<'o>) -> Response<'o, 'a> {
        let request = self.request;
        let mut server_and_request_id = Assembled::<SERVER_AND_REQUEST_ID_BYTES>::new();
        server_and_request_id
            .push(SERVER_AND_REQUEST_ID.as_bytes())
            .push(&self.request_id)
            .push(b"\r\n");
        writer.lines(server_and_request_id.bytes());
        writer.header(
            "x-ms-version",
            request
                .known(KnownHeader::XMsVersion)
                .unwrap_or(API_VERSION_LATEST.as_bytes()),
        );
        if let Some(client_request_id) = request.known(KnownHeader::XMsClientRequestId) {
            writer.header("x-ms-client-request-id", client_request_id);
        }
        let mut date = Assembled::<DATE_LINE_BYTES>::new();
        date.push(b"Date: ")
            .push(&time::rfc1123_cached(self.now_ms))
            .push(b"\r\n");
        writer.lines(date.bytes());
        if !request.keep_alive {
            writer.lines(b"Connection: close\r\n");
        } else if request.version_minor == 0 {
            writer.lines(b"Connection: keep-alive\r\n");
        }
        Response {
            writer,
            cors: self.cors,
            head_open: true,
        }
    }

    /// A response with `status` and no body of its own.
    pub fn empty(&self, status: u16, out: &mut BytesMut) {
        self.start(status, out).finish();
    }

    /// A response with `status` and no body, the answer of an operation that only changes
    /// something (`Reply::Done`).
    pub fn done(&self, status: u16, reply: Reply, out: &mut BytesMut) -> Written {
        let Reply::Done = reply else {
            return Err(reply);
        };
        self.empty(status, out);
        Ok(())
    }

    /// A response with `status` and an XML body that `body` encodes.
    pub fn xml(&self, status: u16, out: &mut BytesMut, body: impl FnOnce(&mut BytesMut)) {
        let mut response = self.start(status, out);
        response.lines(b"Content-Type: application/xml\r\n");
        body(response.body());
        response.finish();
    }

    /// Azure's error response: status with the error's message as its reason phrase (as the
    /// service writes it, and the legacy SDKs' exception texts start with it),
    /// `x-ms-error-code` and the XML error body; a refused bearer token also gets Azure's
    /// challenge, which the SDKs read to ask for a new token.
    pub fn error(&self, error: StorageError, out: &mut BytesMut) {
        self.error_with_detail(error, None, out);
    }

    /// `error`, with Azure's `AuthenticationErrorDetail` for `failure` in the body when `error`
    /// is one of the codes that carry it (`AuthenticationFailed`, `InvalidAuthenticationInfo`);
    /// a fault injected in its place carries none.
    pub fn error_with_detail(
        &self,
        error: StorageError,
        failure: Option<&AuthFailure>,
        out: &mut BytesMut,
    ) {
        let detail = failure
            .filter(|_| {
                matches!(
                    error,
                    StorageError::AuthenticationFailed | StorageError::InvalidAuthenticationInfo
                )
            })
            .and_then(authentication_error_detail);
        let mut response = self.start_with_reason(error.status(), error.message(), out);
        response.header("x-ms-error-code", error.code().as_bytes());
        if error == StorageError::InvalidAuthenticationInfo {
            let challenge = bearer_challenge(self.request.known(KnownHeader::Authorization));
            response.header("WWW-Authenticate", challenge.as_bytes());
        }
        response.header("Content-Type", b"application/xml");
        xml::error(
            response.body(),
            error,
            &self.request_id,
            self.now_ms,
            detail.as_deref(),
        );
        response.finish();
    }
}

impl Responder<'_> {
    /// The table service's error response (its port's probes): status, `x-ms-error-code` and
    /// the OData JSON error body.
    pub fn table_error(&self, error: StorageError, out: &mut BytesMut) {
        let mut response = self.start(error.status(), out);
        response.header("x-ms-error-code", error.code().as_bytes());
        response.header(
            "Content-Type",
            b"application/json;odata=minimalmetadata;streaming=true;charset=utf-8",
        );
        let time = time::format_iso8601_7(self.now_ms);
        let body = super::probe::table_error_body(error, &self.request_id, &time);
        response.body().extend_from_slice(body.as_bytes());
        response.finish();
    }
}

/// A response being written: `ResponseWriter` plus the request's CORS headers, which go last
/// in the head because the exposed headers are chosen among the others.
pub(super) struct Response<'o, 'c> {
    writer: ResponseWriter<'o>,
    cors: Option<&'c CorsHeaders>,
    head_open: bool,
}

impl Response<'_, '_> {
    /// Adds a header.
    pub fn header(&mut self, name: &str, value: &[u8]) {
        self.writer.header(name, value);
    }

    /// Adds a header with a decimal value.
    pub fn header_decimal(&mut self, name: &str, value: u64) {
        self.writer.header_decimal(name, value);
    }

    /// Adds whole header lines of azq's own (`ResponseWriter::lines`).
    pub fn lines(&mut self, lines: &[u8]) {
        self.writer.lines(lines);
    }

    fn close_head(&mut self) {
        if std::mem::take(&mut self.head_open) {
            if let Some(cors) = self.cors {
                cors.write(&mut self.writer);
            }
        }
    }

    /// Closes the head (CORS headers last) and returns the buffer to encode the body into.
    pub fn body(&mut self) -> &mut BytesMut {
        self.close_head();
        self.writer.body()
    }

    /// Completes the response.
    pub fn finish(mut self) {
        self.close_head();
        self.writer.finish();
    }
}
