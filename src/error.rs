//! `StorageError`: every error a client can receive, and its HTTP status, `x-ms-error-code` and
//! text.
//!
//! Each layer has its own small error type (`http::ParseError`, `auth::AuthFailure`); the
//! exhaustive `From` mappings from them live here, beside the enum, so every way a failure
//! reaches a client is in one file. The mapping to status and code is one exhaustive match, so
//! adding a variant without deciding its status does not compile.

use crate::auth::AuthFailure;
use crate::http::ParseError;

/// An error answered to the client in Azure's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageError {
    // 400
    /// A query parameter that is not a number where one is needed, an unknown `comp`, a
    /// `peekonly` other than true/false, or a `popreceipt` that does not decode.
    InvalidQueryParameterValue,
    /// A number outside its range: `numofmessages`, `visibilitytimeout`, `messagettl` of 0
    /// or not above the visibility timeout, a negative `timeout`.
    OutOfRangeQueryParameterValue,
    /// No `comp` where the operation needs one, no `popreceipt` on Update/Delete Message,
    /// no `visibilitytimeout` on Update Message.
    MissingRequiredQueryParameter,
    /// A CORS preflight without `Origin` or `Access-Control-Request-Method`: code
    /// `InvalidHeaderValue`, with the service's own text for it.
    CorsRequiredHeaderMissing,
    /// A path that names no resource: not UTF-8, no account segment, an empty segment, or
    /// more segments than `/queue/messages/id`.
    InvalidUri,
    /// A queue name with characters outside `[a-z0-9-]`, a `-` at either end, or `--`.
    InvalidResourceName,
    /// A queue name shorter than 3 or longer than 63 characters: code `OutOfRangeInput`, with
    /// the service's own text for names rather than the generic one of that code.
    ResourceNameLengthOutOfRange,
    /// A body that is not well-formed XML, misses or repeats a required element, has too many
    /// rules or identifiers, holds markup where a value belongs, or holds characters XML 1.0
    /// cannot.
    InvalidXmlDocument,
    /// A well-formed settings or ACL document with a value out of Azure's rules (a bad
    /// `Id`, a date that is not ISO 8601, a CORS rule over its limits).
    InvalidXmlNodeValue,
    /// An `x-ms-meta-*` name that is not a C# identifier, a duplicate name (ignoring case), or
    /// a value that is not UTF-8 text XML can hold.
    InvalidMetadata,
    /// A bare `x-ms-meta-` header: a metadata pair with an empty name.
    EmptyMetadataKey,
    /// Metadata names plus values over `METADATA_BYTES_MAX` bytes.
    MetadataTooLarge,
    /// The pop receipt names the message but an older lease: it was received or updated
    /// again since.
    PopReceiptMismatch,
    /// A request the HTTP parser rejects (request line, header, `Content-Length`, chunk);
    /// sent with Azure's code `InvalidInput`, then the connection is closed.
    MalformedRequest,
    // 401
    /// A bearer token that is not a JWT or whose audience, issuer or lifetime does not hold;
    /// the response carries Azure's `WWW-Authenticate` bearer challenge.
    InvalidAuthenticationInfo,
    // 403
    /// No or malformed credentials, a signature that matches no key, or a SAS that is expired,
    /// not yet valid or names a stored access policy the queue no longer has; only the log
    /// gets the reason.
    AuthenticationFailed,
    /// A valid SAS whose `sp` does not grant the permission the operation needs.
    AuthorizationPermissionMismatch,
    /// A valid SAS on an operation no SAS permission covers: Get and Set Queue ACL ("attempting
    /// to modify an access control list", the service's SAS error table), and queue management
    /// through a service SAS (the service's answer in Azure/Azurite#662).
    AuthorizationFailure,
    /// A valid account SAS whose `srt` resource types do not cover the resource.
    AuthorizationResourceTypeMismatch,
    /// A valid account SAS whose `ss` services do not include the queue service.
    AuthorizationServiceMismatch,
    /// A valid SAS whose `spr` does not allow the request's protocol (HTTPS only, over HTTP).
    AuthorizationProtocolMismatch,
    /// A valid SAS whose `sip` address range does not hold the client's address; the code
    /// is spelt `AuthorizationSourceIPMismatch` on the wire.
    AuthorizationSourceIpMismatch,
    /// A preflight that no CORS rule of the service properties allows.
    CorsPreflightFailure,
    /// A write on the read-only secondary endpoint.
    InsufficientAccountPermissions,
    // 404
    /// The URL names an account azq does not know.
    ResourceNotFound,
    /// The URL's queue does not exist in this account.
    QueueNotFound,
    /// No such message in the queue: the ID is not a UUID, the message was deleted, or it
    /// expired.
    MessageNotFound,
    // 405
    /// A method the addressed resource does not take (e.g. POST on a queue).
    UnsupportedHttpVerb,
    // 409
    /// Create Queue on a queue that exists with different metadata (same metadata is 204).
    QueueAlreadyExists,
    // 413
    /// A body over `REQUEST_BODY_BYTES_MAX`, or a `MessageText` over `MESSAGE_TEXT_BYTES_MAX`
    /// decoded bytes; an over-long declared body is refused before it is read.
    RequestBodyTooLarge,
    // 431
    /// A request head over `REQUEST_HEAD_BYTES_MAX` bytes or with over `REQUEST_HEADERS_MAX`
    /// headers.
    RequestHeaderTooLarge,
    // 500
    /// An operation answered with a reply it cannot have: a bug, also caught by a
    /// `debug_assert!`.
    InternalError,
    /// Injected by a fault rule (`governor::faults`): the service's answer when an operation ran
    /// out of time, whether or not it was applied.
    OperationTimedOut,
    // 501
    /// An operation of a service azq does not serve: anything on the blob and table ports but
    /// the readiness probes they answer (`api::probe`).
    NotImplemented,
    // 503
    /// A limit was reached: too many connections, queues, message slots or message bytes,
    /// or a shard's mesh channel is closed; nothing was changed. Also an injected fault.
    ServerBusy,
    /// A queue's message operations are over `--queue-rate-limit` (`ServerBusy`, Azure's
    /// per-queue message).
    QueueRateExceeded,
    /// An account's requests are over `--account-rate-limit` (`ServerBusy`, Azure's
    /// per-account message).
    AccountRateExceeded,
}

impl StorageError {
    /// The HTTP status code Azure answers with.
    pub fn status(self) -> u16 {
        use StorageError::*;
        match self {
            InvalidQueryParameterValue
            | OutOfRangeQueryParameterValue
            | MissingRequiredQueryParameter
            | CorsRequiredHeaderMissing
            | InvalidUri
            | InvalidResourceName
            | ResourceNameLengthOutOfRange
            | InvalidXmlDocument
            | InvalidXmlNodeValue
            | InvalidMetadata
            | EmptyMetadataKey
            | MetadataTooLarge
            | PopReceiptMismatch
            | MalformedRequest => 400,
            InvalidAuthenticationInfo => 401,
            AuthenticationFailed
            | AuthorizationPermissionMismatch
            | AuthorizationFailure
            | AuthorizationResourceTypeMismatch
            | AuthorizationServiceMismatch
            | AuthorizationProtocolMismatch
            | AuthorizationSourceIpMismatch
            | CorsPreflightFailure
            | InsufficientAccountPermissions => 403,
            ResourceNotFound | QueueNotFound | MessageNotFound => 404,
            UnsupportedHttpVerb => 405,
            QueueAlreadyExists => 409,
            RequestBodyTooLarge => 413,
            RequestHeaderTooLarge => 431,
            InternalError | OperationTimedOut => 500,
            NotImplemented => 501,
            ServerBusy | QueueRateExceeded | AccountRateExceeded => 503,
        }
    }

    /// The `x-ms-error-code` value and `<Code>` of the body.
    pub fn code(self) -> &'static str {
        use StorageError::*;
        match self {
            InvalidQueryParameterValue => "InvalidQueryParameterValue",
            OutOfRangeQueryParameterValue => "OutOfRangeQueryParameterValue",
            MissingRequiredQueryParameter => "MissingRequiredQueryParameter",
            CorsRequiredHeaderMissing => "InvalidHeaderValue",
            InvalidUri => "InvalidUri",
            InvalidResourceName => "InvalidResourceName",
            ResourceNameLengthOutOfRange => "OutOfRangeInput",
            InvalidXmlDocument => "InvalidXmlDocument",
            InvalidXmlNodeValue => "InvalidXmlNodeValue",
            InvalidMetadata => "InvalidMetadata",
            EmptyMetadataKey => "EmptyMetadataKey",
            MetadataTooLarge => "MetadataTooLarge",
            PopReceiptMismatch => "PopReceiptMismatch",
            MalformedRequest => "InvalidInput",
            InvalidAuthenticationInfo => "InvalidAuthenticationInfo",
            AuthenticationFailed => "AuthenticationFailed",
            AuthorizationPermissionMismatch => "AuthorizationPermissionMismatch",
            AuthorizationFailure => "AuthorizationFailure",
            AuthorizationResourceTypeMismatch => "AuthorizationResourceTypeMismatch",
            AuthorizationServiceMismatch => "AuthorizationServiceMismatch",
            AuthorizationProtocolMismatch => "AuthorizationProtocolMismatch",
            AuthorizationSourceIpMismatch => "AuthorizationSourceIPMismatch",
            CorsPreflightFailure => "CorsPreflightFailure",
            InsufficientAccountPermissions => "InsufficientAccountPermissions",
            ResourceNotFound => "ResourceNotFound",
            QueueNotFound => "QueueNotFound",
            MessageNotFound => "MessageNotFound",
            UnsupportedHttpVerb => "UnsupportedHttpVerb",
            QueueAlreadyExists => "QueueAlreadyExists",
            RequestBodyTooLarge => "RequestBodyTooLarge",
            RequestHeaderTooLarge => "RequestHeaderTooLarge",
            InternalError => "InternalError",
            NotImplemented => "NotImplemented",
            OperationTimedOut => "OperationTimedOut",
            ServerBusy | QueueRateExceeded | AccountRateExceeded => "ServerBusy",
        }
    }

    /// The human-readable first line of `<Message>`, as Azure words it.
    pub fn message(self) -> &'static str {
        use StorageError::*;
        match self {
            InvalidQueryParameterValue => {
                "Value for one of the query parameters specified in the request URI is invalid."
            }
            OutOfRangeQueryParameterValue => {
                "One of the query parameters specified in the request URI is outside the permissible range."
            }
            MissingRequiredQueryParameter => {
                "A query parameter that's mandatory for this request is not specified."
            }
            CorsRequiredHeaderMissing => "A required CORS header is not present.",
            InvalidUri => "The requested URI does not represent any resource on the server.",
            InvalidResourceName => "The specifed resource name contains invalid characters.",
            ResourceNameLengthOutOfRange => {
                "The specified resource name length is not within the permissible limits."
            }
            InvalidXmlDocument => "XML specified is not syntactically valid.",
            InvalidXmlNodeValue => "The value for one of the XML nodes is not in the correct format.",
            InvalidMetadata => "The metadata specified is invalid. It has characters that are not permitted.",
            EmptyMetadataKey => "The key for one of the metadata key-value pairs is empty.",
            MetadataTooLarge => "The size of the specified metadata exceeds the maximum size permitted.",
            PopReceiptMismatch => "The specified pop receipt did not match the pop receipt for a dequeued message.",
            MalformedRequest => "The request could not be parsed as HTTP/1.1.",
            InvalidAuthenticationInfo => {
                "Server failed to authenticate the request. Please refer to the information in the www-authenticate header."
            }
            AuthenticationFailed => {
                "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature."
            }
            AuthorizationPermissionMismatch => {
                "This request is not authorized to perform this operation using this permission."
            }
            AuthorizationFailure => "This request is not authorized to perform this operation.",
            AuthorizationResourceTypeMismatch => {
                "This request is not authorized to perform this operation using this resource type."
            }
            AuthorizationServiceMismatch => {
                "This request is not authorized to perform this operation using this service."
            }
            AuthorizationProtocolMismatch => {
                "This request is not authorized to perform this operation using this protocol."
            }
            AuthorizationSourceIpMismatch => {
                "This request is not authorized to perform this operation using this source IP."
            }
            CorsPreflightFailure => "CORS not enabled or no matching rule found for this request.",
            InsufficientAccountPermissions => "Write operations are not allowed.",
            ResourceNotFound => "The specified resource does not exist.",
            QueueNotFound => "The specified queue does not exist.",
            MessageNotFound => "The specified message does not exist.",
            UnsupportedHttpVerb => "The resource doesn't support the specified HTTP verb.",
            QueueAlreadyExists => "The specified queue already exists.",
            RequestBodyTooLarge => "The request body is too large and exceeds the maximum permissible limit.",
            RequestHeaderTooLarge => "The size of the request headers exceeds the maximum permissible limit.",
            InternalError => "The server encountered an internal error. Please retry the request.",
            NotImplemented => {
                "azq serves queues only: its blob and table ports answer readiness checks (List \
                 Containers, Get Blob Service Properties, Query Tables) and nothing else."
            }
            OperationTimedOut => "The operation could not be completed within the permitted time.",
            ServerBusy => "The server is currently unable to receive requests. Please retry your request.",
            QueueRateExceeded => "The server is busy.",
            AccountRateExceeded => "Operations per second is over the account limit.",
        }
    }
}

/// What the client is told of a request the parser could not take; the log gets the reason.
impl From<ParseError> for StorageError {
    fn from(error: ParseError) -> StorageError {
        match error {
            ParseError::HeadTooLarge | ParseError::TooManyHeaders => {
                StorageError::RequestHeaderTooLarge
            }
            ParseError::BodyTooLarge => StorageError::RequestBodyTooLarge,
            ParseError::Malformed(_) => StorageError::MalformedRequest,
        }
    }
}

/// What the client is told of a failed authentication: the code the service uses (and, with
/// `authentication_error_detail`, its detail); the log gets the reason.
impl From<AuthFailure> for StorageError {
    fn from(failure: AuthFailure) -> StorageError {
        match failure {
            AuthFailure::UnknownAccount => StorageError::ResourceNotFound,
            AuthFailure::NoCredentials
            | AuthFailure::MalformedAuthorization(_)
            | AuthFailure::UnsupportedScheme
            | AuthFailure::AccountMismatch
            | AuthFailure::MalformedQuery
            | AuthFailure::SignatureMismatch { .. }
            | AuthFailure::MalformedSas(_)
            | AuthFailure::MissingSasField(_)
            | AuthFailure::UnsupportedSasVersion
            | AuthFailure::UserDelegationSasVersion
            | AuthFailure::UserDelegationKeyService
            | AuthFailure::UserDelegationWithPolicy
            | AuthFailure::UserDelegationKeyNotValid(_)
            | AuthFailure::DelegatedUserMismatch
            | AuthFailure::BearerRequired
            | AuthFailure::BearerWithoutIdentity
            | AuthFailure::ServiceSasWithoutQueue
            | AuthFailure::StoredPolicyNotFound
            | AuthFailure::StoredPolicyConflict(_)
            | AuthFailure::SasTimesInverted(_)
            | AuthFailure::SasNotYetValid(_)
            | AuthFailure::SasExpired(_)
            | AuthFailure::RequestDateMissing
            | AuthFailure::RequestDateInvalid
            | AuthFailure::RequestDateTooOld
            | AuthFailure::RequestDateInFuture
            | AuthFailure::BearerOverHttp
            | AuthFailure::BearerDisabled => StorageError::AuthenticationFailed,
            AuthFailure::InvalidBearerToken(_) => StorageError::InvalidAuthenticationInfo,
            AuthFailure::ProtocolMismatch => StorageError::AuthorizationProtocolMismatch,
            AuthFailure::SourceIpMismatch => StorageError::AuthorizationSourceIpMismatch,
            AuthFailure::ServiceMismatch => StorageError::AuthorizationServiceMismatch,
            AuthFailure::ResourceTypeMismatch => StorageError::AuthorizationResourceTypeMismatch,
            AuthFailure::PermissionMismatch => StorageError::AuthorizationPermissionMismatch,
            AuthFailure::OperationNotAllowed => StorageError::AuthorizationFailure,
        }
    }
}

/// The `<AuthenticationErrorDetail>` Azure adds to an `AuthenticationFailed` (403) or
/// `InvalidAuthenticationInfo` (401) body: the first thing a developer reads when a signature
/// fails. `None` for failures that answer another code, and for a request with no credentials
/// at all (the service gives no detail there).
///
/// Where the service's wording is known (its recorded answers; the Storage Emulator's shared
/// code for SAS fields and stored policies) it is used verbatim; the rest is azq's, in the
/// same style. The details show what the service shows: the string azq signed, the signature
/// found in the request and the times compared, never a key.
pub fn authentication_error_detail(failure: &AuthFailure) -> Option<String> {
    use crate::auth::TimeFrame;
    let date = |ms: u64| String::from_utf8_lossy(&crate::time::rfc1123(ms)).into_owned();
    let time_frame = |frame: &TimeFrame| {
        format!(
            "Signature not valid in the specified time frame: Start [{}] - Expiry [{}] - \
             Current [{}]",
            date(frame.start_ms),
            date(frame.expiry_ms),
            date(frame.now_ms)
        )
    };
    let detail = match failure {
        AuthFailure::NoCredentials | AuthFailure::UnknownAccount => return None,
        AuthFailure::ProtocolMismatch
        | AuthFailure::SourceIpMismatch
        | AuthFailure::ServiceMismatch
        | AuthFailure::ResourceTypeMismatch
        | AuthFailure::PermissionMismatch
        | AuthFailure::OperationNotAllowed => return None,
        AuthFailure::SignatureMismatch {
            string_to_sign,
            request_signature: Some(signature),
        } => format!(
            "The MAC signature found in the HTTP request '{signature}' is not the same as any \
             computed signature. Server used following string to sign: '{string_to_sign}'."
        ),
        AuthFailure::SignatureMismatch {
            string_to_sign,
            request_signature: None,
        } => format!("Signature did not match. String to sign used was {string_to_sign}"),
        AuthFailure::SasTimesInverted(frame) => format!(
            "Signed expiry time [{}] must be after signed start time [{}]",
            date(frame.expiry_ms),
            date(frame.start_ms)
        ),
        AuthFailure::SasNotYetValid(frame) | AuthFailure::SasExpired(frame) => time_frame(frame),
        AuthFailure::UserDelegationKeyNotValid(frame) => format!(
            "The user delegation key is not valid in the specified time frame: Start [{}] - \
             Expiry [{}] - Current [{}]",
            date(frame.start_ms),
            date(frame.expiry_ms),
            date(frame.now_ms)
        ),
        AuthFailure::UserDelegationSasVersion => format!(
            "A user delegation SAS for the queue service needs signed version {} or later.",
            crate::auth::delegation::USER_DELEGATION_SAS_VERSION_OLDEST
        ),
        AuthFailure::UserDelegationKeyService => {
            "The user delegation key was issued for another service (sks is not q).".to_string()
        }
        AuthFailure::UserDelegationWithPolicy => {
            "Stored access policies are not supported for a user delegation SAS.".to_string()
        }
        AuthFailure::DelegatedUserMismatch => {
            "The SAS is bound to a delegated user (sduoid): the request must carry a bearer \
             token issued to that user."
                .to_string()
        }
        AuthFailure::BearerRequired => "Only authentication scheme Bearer is supported".to_string(),
        AuthFailure::RequestDateMissing => {
            "The request has no x-ms-date or Date header.".to_string()
        }
        AuthFailure::RequestDateInvalid => {
            "The request's x-ms-date or Date header is not an RFC 1123 date.".to_string()
        }
        AuthFailure::RequestDateTooOld => "Request date header too old.".to_string(),
        AuthFailure::RequestDateInFuture => {
            "Request date header too far in the future.".to_string()
        }
        AuthFailure::BearerWithoutIdentity => {
            "The token names no object (oid) or tenant (tid) to issue a user delegation key to."
                .to_string()
        }
        AuthFailure::MissingSasField(field) => format!("{field} is mandatory. Cannot be empty"),
        AuthFailure::MalformedSas(_) => "Signature fields not well formed.".to_string(),
        AuthFailure::StoredPolicyNotFound => {
            "SAS identifier cannot be found for specified signed identifier".to_string()
        }
        AuthFailure::StoredPolicyConflict(_) => {
            "Access policy fields can be associated with signature or SAS identifier but not \
             both"
                .to_string()
        }
        AuthFailure::UnsupportedSasVersion => {
            "The signed version (sv) is older than any version the service supports.".to_string()
        }
        AuthFailure::ServiceSasWithoutQueue => {
            "A queue service SAS can be used only on its queue and its messages.".to_string()
        }
        AuthFailure::MalformedAuthorization(why) => {
            format!("The Authorization header is not well formed: {why}.")
        }
        AuthFailure::UnsupportedScheme => {
            "The authentication scheme of the Authorization header is not supported.".to_string()
        }
        AuthFailure::AccountMismatch => {
            "The account in the Authorization header is not the account of the request URL."
                .to_string()
        }
        AuthFailure::MalformedQuery => {
            "The query string is not well formed: a percent-escape is broken.".to_string()
        }
        AuthFailure::BearerOverHttp => {
            "Authentication scheme Bearer is not allowed with HTTP.".to_string()
        }
        AuthFailure::BearerDisabled => "Authentication scheme Bearer is not supported.".to_string(),
        AuthFailure::InvalidBearerToken(problem) => problem.reason().to_string(),
    };
    Some(detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::TimeFrame;

    #[test]
    fn parse_error_mapping_table() {
        let cases = [
            (
                ParseError::HeadTooLarge,
                StorageError::RequestHeaderTooLarge,
                431,
            ),
            (
                ParseError::TooManyHeaders,
                StorageError::RequestHeaderTooLarge,
                431,
            ),
            (
                ParseError::BodyTooLarge,
                StorageError::RequestBodyTooLarge,
                413,
            ),
            (
                ParseError::Malformed("bad"),
                StorageError::MalformedRequest,
                400,
            ),
        ];
        for (error, expected, status) in cases {
            assert_eq!(StorageError::from(error), expected);
            assert_eq!(expected.status(), status);
        }
    }

    /// 2026-11-22 00:00 to 2026-11-23 00:00, seen on 2026-11-23 at 01:00.
    const TIME_FRAME: TimeFrame = TimeFrame {
        start_ms: 1_795_305_600_000,
        expiry_ms: 1_795_392_000_000,
        now_ms: 1_795_395_600_000,
    };

    #[test]
    fn authentication_error_detail_table() {
        use crate::auth::bearer::TokenProblem;
        let cases = [
            // The service's own texts.
            (
                AuthFailure::SignatureMismatch {
                    string_to_sign: "GET\n\n/devstoreaccount1/q".to_string(),
                    request_signature: Some("c2ln".to_string()),
                },
                "The MAC signature found in the HTTP request 'c2ln' is not the same as any \
                 computed signature. Server used following string to sign: \
                 'GET\n\n/devstoreaccount1/q'.",
            ),
            (
                AuthFailure::SignatureMismatch {
                    string_to_sign: "r\n\n2026-11-23".to_string(),
                    request_signature: None,
                },
                "Signature did not match. String to sign used was r\n\n2026-11-23",
            ),
            (
                AuthFailure::SasExpired(TIME_FRAME),
                "Signature not valid in the specified time frame: Start [Sun, 22 Nov 2026 \
                 00:00:00 GMT] - Expiry [Mon, 23 Nov 2026 00:00:00 GMT] - Current [Mon, 23 Nov \
                 2026 01:00:00 GMT]",
            ),
            (
                AuthFailure::SasTimesInverted(TimeFrame {
                    start_ms: TIME_FRAME.expiry_ms,
                    expiry_ms: TIME_FRAME.start_ms,
                    now_ms: TIME_FRAME.now_ms,
                }),
                "Signed expiry time [Sun, 22 Nov 2026 00:00:00 GMT] must be after signed start \
                 time [Mon, 23 Nov 2026 00:00:00 GMT]",
            ),
            (
                AuthFailure::MissingSasField("se"),
                "se is mandatory. Cannot be empty",
            ),
            (
                AuthFailure::InvalidBearerToken(TokenProblem::Audience),
                "Audience validation failed. Audience did not match.",
            ),
        ];
        for (failure, expected) in cases {
            assert_eq!(
                authentication_error_detail(&failure).as_deref(),
                Some(expected)
            );
        }
        // Failures that answer another code carry no detail, nor does a request that sent
        // no credentials.
        for failure in [
            AuthFailure::PermissionMismatch,
            AuthFailure::OperationNotAllowed,
            AuthFailure::NoCredentials,
            AuthFailure::UnknownAccount,
        ] {
            assert_eq!(authentication_error_detail(&failure), None, "{failure:?}");
        }
    }

    #[test]
    fn failure_mapping_table() {
        let cases = [
            (AuthFailure::UnknownAccount, StorageError::ResourceNotFound),
            (
                AuthFailure::NoCredentials,
                StorageError::AuthenticationFailed,
            ),
            (
                AuthFailure::SasExpired(TIME_FRAME),
                StorageError::AuthenticationFailed,
            ),
            (
                AuthFailure::SasNotYetValid(TIME_FRAME),
                StorageError::AuthenticationFailed,
            ),
            (
                AuthFailure::SignatureMismatch {
                    string_to_sign: String::new(),
                    request_signature: None,
                },
                StorageError::AuthenticationFailed,
            ),
            (
                AuthFailure::ProtocolMismatch,
                StorageError::AuthorizationProtocolMismatch,
            ),
            (
                AuthFailure::SourceIpMismatch,
                StorageError::AuthorizationSourceIpMismatch,
            ),
            (
                AuthFailure::ServiceMismatch,
                StorageError::AuthorizationServiceMismatch,
            ),
            (
                AuthFailure::ResourceTypeMismatch,
                StorageError::AuthorizationResourceTypeMismatch,
            ),
            (
                AuthFailure::PermissionMismatch,
                StorageError::AuthorizationPermissionMismatch,
            ),
            (
                AuthFailure::OperationNotAllowed,
                StorageError::AuthorizationFailure,
            ),
            (
                AuthFailure::BearerOverHttp,
                StorageError::AuthenticationFailed,
            ),
            (
                AuthFailure::BearerDisabled,
                StorageError::AuthenticationFailed,
            ),
            (
                AuthFailure::InvalidBearerToken(crate::auth::bearer::TokenProblem::Expired),
                StorageError::InvalidAuthenticationInfo,
            ),
        ];
        for (failure, expected) in cases {
            assert!(!failure.to_string().is_empty());
            assert_eq!(StorageError::from(failure), expected);
        }
        assert_eq!(
            StorageError::from(AuthFailure::SourceIpMismatch).code(),
            "AuthorizationSourceIPMismatch"
        );
        assert_eq!(StorageError::InvalidAuthenticationInfo.status(), 401);
    }
}
