//! The blob (10000) and table (10002) ports of `azurite` mode, which exist for the readiness and
//! health checks that Azurite's users point at them (Testcontainers modules wait on those ports,
//! .NET Aspire's storage resource turns healthy on a blob List Containers), and for nothing else:
//! azq serves queues.
//!
//! Three requests are answered, authenticated as Azure authenticates them (SharedKey and
//! SharedKeyLite, the table service's own layouts on its port; an account SAS covering the
//! service; a bearer token under `--oauth`): blob List Containers (an empty
//! `EnumerationResults`), Get Blob Service Properties (everything off) and table Query Tables
//! (an empty `value`). Everything else gets 501 `NotImplemented` with Azure's error body saying
//! that this server serves queues: XML on the blob port, OData JSON on the table port.

use std::net::IpAddr;

use bytes::{BufMut, BytesMut};

use crate::auth::{Access, RequestContext};
use crate::error::StorageError;
use crate::http::{Method, Query, Request};

use super::router::{addressed, Addressed};
use super::xml::escape_into;
use super::{AdminAnswer, AdminStep, Plan, ResponsePlan, Service, Step};

/// Which of Azurite's services a listener stands in for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// The queue service: everything azq is.
    Queue,
    /// The blob service's port: readiness probes only.
    Blob,
    /// The table service's port: readiness probes only.
    Table,
}

impl Surface {
    /// The service's name in Azurite's start-up lines (`Azurite Blob service is …`).
    pub fn name(self) -> &'static str {
        match self {
            Surface::Queue => "Queue",
            Surface::Blob => "Blob",
            Surface::Table => "Table",
        }
    }
}

/// Get Blob Service Properties of an account nobody configured: logging, metrics, CORS, soft
/// delete and static websites all off, in the element order of the service's answer.
const BLOB_SERVICE_PROPERTIES: &str = concat!(
    "<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceProperties>",
    "<Logging><Version>1.0</Version><Delete>false</Delete><Read>false</Read>",
    "<Write>false</Write><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging>",
    "<HourMetrics><Version>1.0</Version><Enabled>false</Enabled>",
    "<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></HourMetrics>",
    "<MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled>",
    "<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics>",
    "<Cors /><DeleteRetentionPolicy><Enabled>false</Enabled></DeleteRetentionPolicy>",
    "<StaticWebsite><Enabled>false</Enabled></StaticWebsite></StorageServiceProperties>",
);

/// What a probe port can answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    ListContainers,
    GetBlobServiceProperties,
    QueryTables,
}

impl Probe {
    fn access(self) -> Access {
        match self {
            Probe::ListContainers => Access::LIST_CONTAINERS,
            Probe::GetBlobServiceProperties => Access::GET_BLOB_SERVICE_PROPERTIES,
            Probe::QueryTables => Access::QUERY_TABLES,
        }
    }
}

impl Service {
    /// The plan of a request to the blob or table port (`surface`); `now_ms` and `peer` as for
    /// `Service::plan`.
    pub(super) fn plan_probe(
        &self,
        surface: Surface,
        request: &Request,
        now_ms: u64,
        peer: IpAddr,
    ) -> Plan {
        debug_assert_ne!(surface, Surface::Queue);
        let fail = |error: StorageError| Plan {
            step: Step::Fail(error),
            response: ResponsePlan {
                json_errors: surface == Surface::Table,
                ..ResponsePlan::default()
            },
            auth_failure: None,
        };
        let Some(query) = Query::parse(request.query()) else {
            return fail(StorageError::InvalidQueryParameterValue);
        };
        let target = match addressed(
            request.header_str("host"),
            request.path(),
            |name| self.is_account(name),
            self.host_style_enabled,
        ) {
            Ok(target) => target,
            Err(error) => return fail(error),
        };
        let reading = matches!(request.method, Method::Get | Method::Head);
        let probe = match (surface, &target.resource[..]) {
            (Surface::Blob, []) if reading && query.get("comp") == Some("list") => {
                Probe::ListContainers
            }
            (Surface::Blob, [])
                if reading
                    && query.get("restype") == Some("service")
                    && query.get("comp") == Some("properties") =>
            {
                Probe::GetBlobServiceProperties
            }
            (Surface::Table, ["Tables" | "Tables()"]) if reading => Probe::QueryTables,
            _ => return fail(StorageError::NotImplemented),
        };
        let context = RequestContext {
            account_name: target.account,
            secondary: target.secondary,
            queue_name: None,
            now_ms,
            client_ip: peer,
            secure_transport: self.secure_transport,
        };
        let authenticated = self.authenticator.borrow_mut().authenticate(
            request,
            &query,
            &context,
            probe.access(),
            &|_| None,
        );
        if let Err(failure) = authenticated {
            let mut plan = fail(StorageError::from(failure.clone()));
            plan.auth_failure = Some(failure);
            return plan;
        }
        let answer = match probe {
            Probe::ListContainers => AdminAnswer {
                status: 200,
                content_type: "application/xml",
                body: self.empty_container_list(request, &query, &target),
                headers: Vec::new(),
            },
            Probe::GetBlobServiceProperties => AdminAnswer {
                status: 200,
                content_type: "application/xml",
                body: BLOB_SERVICE_PROPERTIES.to_string(),
                headers: Vec::new(),
            },
            Probe::QueryTables => self.empty_table_list(request, &target),
        };
        Plan {
            step: Step::Admin(AdminStep::Answer(answer)),
            response: ResponsePlan::default(),
            auth_failure: None,
        }
    }

    /// The URL of the account on the port the request came to, with its trailing slash.
    fn account_url(&self, request: &Request, target: &Addressed<'_>) -> String {
        let scheme = if self.secure_transport {
            "https"
        } else {
            "http"
        };
        let authority = request
            .header_str("host")
            .unwrap_or(&self.default_authority);
        if target.host_style {
            format!("{scheme}://{authority}/")
        } else {
            format!("{scheme}://{authority}/{}/", target.account)
        }
    }

    /// List Containers with no container: the page the service gives an empty account, with
    /// `prefix`, `marker` and `maxresults` echoed when sent.
    fn empty_container_list(
        &self,
        request: &Request,
        query: &Query<'_>,
        target: &Addressed<'_>,
    ) -> String {
        let mut out = BytesMut::with_capacity(256);
        out.put_slice(b"<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults ");
        out.put_slice(b"ServiceEndpoint=\"");
        escape_into(&mut out, self.account_url(request, target).as_bytes());
        out.put_slice(b"\">");
        for (parameter, element) in [
            ("prefix", "Prefix"),
            ("marker", "Marker"),
            ("maxresults", "MaxResults"),
        ] {
            if let Some(value) = query.get(parameter) {
                out.put_slice(format!("<{element}>").as_bytes());
                escape_into(&mut out, value.as_bytes());
                out.put_slice(format!("</{element}>").as_bytes());
            }
        }
        out.put_slice(b"<Containers /><NextMarker /></EnumerationResults>");
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Query Tables with no table, in the OData flavour the client asked for (`Accept`): no
    /// metadata gives `{"value":[]}`, minimal (the default) and full add the metadata URL.
    fn empty_table_list(&self, request: &Request, target: &Addressed<'_>) -> AdminAnswer {
        let accept = request.header_str("accept").unwrap_or_default();
        let body = if accept.contains("odata=nometadata") {
            "{\"value\":[]}".to_string()
        } else {
            let metadata = format!("{}$metadata#Tables", self.account_url(request, target));
            serde_json::json!({ "odata.metadata": metadata, "value": [] }).to_string()
        };
        AdminAnswer {
            status: 200,
            content_type: if accept.contains("odata=nometadata") {
                "application/json;odata=nometadata;streaming=true;charset=utf-8"
            } else if accept.contains("odata=fullmetadata") {
                "application/json;odata=fullmetadata;streaming=true;charset=utf-8"
            } else {
                "application/json;odata=minimalmetadata;streaming=true;charset=utf-8"
            },
            body,
            headers: Vec::new(),
        }
    }
}

/// The table service's error body (OData JSON): `{"odata.error":{"code":…,"message":{"lang":
/// "en-US","value":…}}}`, the value ending with the request ID and time as in XML errors.
pub(super) fn table_error_body(error: StorageError, request_id: &[u8], time: &[u8]) -> String {
    let value = format!(
        "{}\nRequestId:{}\nTime:{}",
        error.message(),
        String::from_utf8_lossy(request_id),
        String::from_utf8_lossy(time)
    );
    serde_json::json!({
        "odata.error": {
            "code": error.code(),
            "message": { "lang": "en-US", "value": value },
        }
    })
    .to_string()
}
