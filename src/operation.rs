//! `Operation`: every REST operation azq answers, by the name Azure's documentation gives it.
//! Low in the crate because both sides of a request use it: `api/` routes a request to one,
//! and `governor/` matches fault rules and counts answers by it.

/// Every operation of the Queue service REST API azq answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `GET /?restype=service&comp=properties`: logging, metrics and CORS settings.
    GetServiceProperties,
    /// `PUT /?restype=service&comp=properties`: replaces the elements the body carries.
    SetServiceProperties,
    /// `GET /?restype=service&comp=stats`, only on the `-secondary` account: replication status.
    GetServiceStats,
    /// `POST /?restype=service&comp=userdelegationkey`: a key to sign user delegation SAS with,
    /// for the bearer token's identity.
    GetUserDelegationKey,
    /// `GET /?comp=list`: the account's queues by name, one page at a time.
    ListQueues,
    /// `PUT /queue`: 201 when created, 204 when it exists with the same metadata.
    CreateQueue,
    /// `DELETE /queue`: the queue and all its messages.
    DeleteQueue,
    /// `GET`/`HEAD /queue?comp=metadata`: the metadata and approximate message count.
    GetQueueMetadata,
    /// `PUT /queue?comp=metadata`: replaces all of the queue's metadata.
    SetQueueMetadata,
    /// `GET`/`HEAD /queue?comp=acl`: the queue's stored access policies.
    GetQueueAcl,
    /// `PUT /queue?comp=acl`: replaces the queue's stored access policies.
    SetQueueAcl,
    /// `POST /queue/messages`: adds a message, visible now or after `visibilitytimeout`.
    PutMessage,
    /// `GET /queue/messages`: leases up to `numofmessages` visible messages, with pop receipts.
    GetMessages,
    /// `GET /queue/messages?peekonly=true`: reads visible messages without leasing them.
    PeekMessages,
    /// `DELETE /queue/messages`: deletes every message of the queue.
    ClearMessages,
    /// `PUT /queue/messages/id?popreceipt=…`: new visibility timeout, optionally new text.
    UpdateMessage,
    /// `DELETE /queue/messages/id?popreceipt=…`: the receipt comes from Put, Get or Update.
    DeleteMessage,
    /// CORS preflight (`OPTIONS`), answered without authentication.
    Preflight,
    /// azq's own `GET /_azq/health`, answered without authentication.
    Health,
    /// `GET /_azq/cert.pem`: the server's certificate (azq's own, HTTPS only).
    Certificate,
}

impl Operation {
    /// Every operation, in declaration order: `index` is the position here.
    pub const ALL: [Operation; 20] = [
        Operation::GetServiceProperties,
        Operation::SetServiceProperties,
        Operation::GetServiceStats,
        Operation::GetUserDelegationKey,
        Operation::ListQueues,
        Operation::CreateQueue,
        Operation::DeleteQueue,
        Operation::GetQueueMetadata,
        Operation::SetQueueMetadata,
        Operation::GetQueueAcl,
        Operation::SetQueueAcl,
        Operation::PutMessage,
        Operation::GetMessages,
        Operation::PeekMessages,
        Operation::ClearMessages,
        Operation::UpdateMessage,
        Operation::DeleteMessage,
        Operation::Preflight,
        Operation::Health,
        Operation::Certificate,
    ];

    /// The REST operation's name as Azure's documentation spells it (fault rules and metrics
    /// labels use it).
    pub fn name(self) -> &'static str {
        use Operation::*;
        match self {
            GetServiceProperties => "GetServiceProperties",
            SetServiceProperties => "SetServiceProperties",
            GetServiceStats => "GetServiceStats",
            GetUserDelegationKey => "GetUserDelegationKey",
            ListQueues => "ListQueues",
            CreateQueue => "CreateQueue",
            DeleteQueue => "DeleteQueue",
            GetQueueMetadata => "GetQueueMetadata",
            SetQueueMetadata => "SetQueueMetadata",
            GetQueueAcl => "GetQueueAcl",
            SetQueueAcl => "SetQueueAcl",
            PutMessage => "PutMessage",
            GetMessages => "GetMessages",
            PeekMessages => "PeekMessages",
            ClearMessages => "ClearMessages",
            UpdateMessage => "UpdateMessage",
            DeleteMessage => "DeleteMessage",
            Preflight => "Preflight",
            Health => "Health",
            Certificate => "Certificate",
        }
    }

    /// The operation's position in `ALL`, for per-operation counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether the operation only reads, and so may run on the read-only secondary endpoint.
    /// Get Messages changes the messages it leases, so it is a write; Get User Delegation Key
    /// changes nothing (a POST only because it has a body).
    pub fn is_read_only(self) -> bool {
        use Operation::*;
        match self {
            GetServiceProperties | GetServiceStats | GetUserDelegationKey | ListQueues
            | GetQueueMetadata | GetQueueAcl | PeekMessages | Preflight | Health | Certificate => {
                true
            }
            SetServiceProperties | CreateQueue | DeleteQueue | SetQueueMetadata | SetQueueAcl
            | PutMessage | GetMessages | ClearMessages | UpdateMessage | DeleteMessage => false,
        }
    }

    /// Whether the operation's answer can run to megabytes (32 messages of 64 KiB, a page of
    /// 5,000 queues with their metadata) rather than a few KiB at most: what a shard whose
    /// clients leave too many answers unread refuses with 503 `ServerBusy`.
    pub fn answers_in_bulk(self) -> bool {
        use Operation::*;
        match self {
            ListQueues | GetMessages | PeekMessages => true,
            GetServiceProperties | SetServiceProperties | GetServiceStats
            | GetUserDelegationKey | CreateQueue | DeleteQueue | GetQueueMetadata
            | SetQueueMetadata | GetQueueAcl | SetQueueAcl | PutMessage | ClearMessages
            | UpdateMessage | DeleteMessage | Preflight | Health | Certificate => false,
        }
    }
}
