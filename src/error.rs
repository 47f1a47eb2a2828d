//! `StorageError`: every error a client can receive, and its HTTP status, `x-ms-error-code` and text.
//!
//! Each layer has its own small error type (`http::ParseError`, `auth::AuthFailure`, …); they become a
//! `StorageError` in `api/`. The mapping to status and code is one exhaustive match, so adding a
//! variant without deciding its status does not compile.

/// An error answered to the client in Azure's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageError {
    // 400
    InvalidQueryParameterValue,
    OutOfRangeQueryParameterValue,
    MissingRequiredQueryParameter,
    UnsupportedQueryParameter,
    InvalidHeaderValue,
    /// A CORS preflight without `Origin` or `Access-Control-Request-Method`: code
    /// `InvalidHeaderValue`, with the service's own text for it.
    CorsRequiredHeaderMissing,
    InvalidInput,
    InvalidUri,
    InvalidResourceName,
    /// A queue name shorter than 3 or longer than 63 characters: code `OutOfRangeInput`, with
    /// the service's own text for names rather than the generic one of that code.
    ResourceNameLengthOutOfRange,
    InvalidXmlDocument,
    InvalidXmlNodeValue,
    InvalidMetadata,
    EmptyMetadataKey,
    MetadataTooLarge,
    PopReceiptMismatch,
    MalformedRequest,
    // 403
    AuthenticationFailed,
    AuthorizationPermissionMismatch,
    AuthorizationResourceTypeMismatch,
    AuthorizationServiceMismatch,
    AuthorizationProtocolMismatch,
    AuthorizationSourceIpMismatch,
    CorsPreflightFailure,
    /// A write on the read-only secondary endpoint.
    InsufficientAccountPermissions,
    // 404
    ResourceNotFound,
    QueueNotFound,
    MessageNotFound,
    // 405
    UnsupportedHttpVerb,
    // 409
    QueueAlreadyExists,
    // 413
    RequestBodyTooLarge,
    // 431
    RequestHeaderTooLarge,
    // 500
    InternalError,
    // 503
    ServerBusy,
}

impl StorageError {
    /// The HTTP status code Azure answers with.
    pub fn status(self) -> u16 {
        use StorageError::*;
        match self {
            InvalidQueryParameterValue
            | OutOfRangeQueryParameterValue
            | MissingRequiredQueryParameter
            | UnsupportedQueryParameter
            | InvalidHeaderValue
            | CorsRequiredHeaderMissing
            | InvalidInput
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
            AuthenticationFailed
            | AuthorizationPermissionMismatch
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
            InternalError => 500,
            ServerBusy => 503,
        }
    }

    /// The `x-ms-error-code` value and `<Code>` of the body.
    pub fn code(self) -> &'static str {
        use StorageError::*;
        match self {
            InvalidQueryParameterValue => "InvalidQueryParameterValue",
            OutOfRangeQueryParameterValue => "OutOfRangeQueryParameterValue",
            MissingRequiredQueryParameter => "MissingRequiredQueryParameter",
            UnsupportedQueryParameter => "UnsupportedQueryParameter",
            InvalidHeaderValue => "InvalidHeaderValue",
            CorsRequiredHeaderMissing => "InvalidHeaderValue",
            InvalidInput => "InvalidInput",
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
            AuthenticationFailed => "AuthenticationFailed",
            AuthorizationPermissionMismatch => "AuthorizationPermissionMismatch",
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
            ServerBusy => "ServerBusy",
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
            UnsupportedQueryParameter => {
                "One of the query parameters specified in the request URI is not supported."
            }
            InvalidHeaderValue => {
                "The value for one of the HTTP headers is not in the correct format."
            }
            CorsRequiredHeaderMissing => "A required CORS header is not present.",
            InvalidInput => "One of the request inputs is not valid.",
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
            AuthenticationFailed => {
                "Server failed to authenticate the request. Make sure the value of the Authorization header is formed correctly including the signature."
            }
            AuthorizationPermissionMismatch => {
                "This request is not authorized to perform this operation using this permission."
            }
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
            ServerBusy => "The server is currently unable to receive requests. Please retry your request.",
        }
    }

    /// The HTTP reason phrase that goes with `status()`.
    pub fn reason(self) -> &'static str {
        crate::http::response::reason_phrase(self.status())
    }
}
