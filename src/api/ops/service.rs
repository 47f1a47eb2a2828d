//! The account-level operations: List Queues, Get/Set Service Properties, Get Service Stats,
//! Get User Delegation Key, and the CORS preflight (which any path can receive).

use bytes::BytesMut;

use crate::auth::delegation::UserDelegationKey;
use crate::auth::{bearer, bearer_token};
use crate::error::StorageError;
use crate::http::Request;
use crate::limits::{LIST_QUEUES_RESULTS_MAX, USER_DELEGATION_KEY_LIFETIME_MS_MAX};
use crate::queue::{self, Command, Replicas, Reply};

use super::super::plan::{fail, Planning};
use super::super::response::{Responder, Written, API_VERSION_LATEST};
use super::super::{
    cors, delegation_xml, settings_xml, validate, xml, Echo, ListingEcho, Operation, Plan,
    ResponsePlan, Route, Step,
};

/// The CORS preflight, answered from the account's rules alone, without authentication, as
/// Azure does.
pub fn preflight(request: &Request, route: &Route<'_>, replicas: &Replicas) -> Plan {
    match cors::preflight(
        request.header_str("origin"),
        request.header_str("access-control-request-method"),
        request.header_str("access-control-request-headers"),
        &replicas.service_properties(route.account).cors,
    ) {
        Ok(headers) => Plan {
            step: Step::Answer(Reply::Done),
            response: ResponsePlan {
                operation: Some(Operation::Preflight),
                cors: Some(headers),
                ..ResponsePlan::default()
            },
        },
        Err(error) => fail(Some(Operation::Preflight), error),
    }
}

/// 200, with the CORS headers the plan carries.
pub fn preflight_response(responder: &Responder<'_>, reply: Reply, out: &mut BytesMut) -> Written {
    responder.done(200, reply, out)
}

/// Answered from this shard's copy of the account's properties.
pub fn get_service_properties(planning: &Planning<'_, '_>) -> Step {
    Step::Answer(Reply::ServiceProperties(
        planning
            .replicas
            .service_properties(planning.route.account)
            .clone(),
    ))
}

/// 200 with the `StorageServiceProperties` document.
pub fn get_service_properties_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    let Reply::ServiceProperties(properties) = reply else {
        return Err(reply);
    };
    responder.xml(200, out, |body| {
        settings_xml::service_properties_into(body, &properties)
    });
    Ok(())
}

/// The account's home shard merges the update and replicates the result.
pub fn set_service_properties(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    let account = planning.route.account;
    Ok(Step::Replicated {
        shard: queue::home_shard(account, planning.shards),
        command: Command::SetServiceProperties {
            update: Box::new(settings_xml::service_properties_update(
                &planning.request.body,
            )?),
            account: account.to_string(),
        },
    })
}

/// 202 Accepted, as Azure answers.
pub fn set_service_properties_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    responder.done(202, reply, out)
}

/// Azure serves statistics only on the secondary endpoint.
pub fn get_service_stats(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    if planning.route.secondary {
        Ok(Step::Answer(Reply::Done))
    } else {
        Err(StorageError::InvalidQueryParameterValue)
    }
}

/// 200 with `StorageServiceStats`: an emulator's secondary is always live and in sync.
pub fn get_service_stats_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    let Reply::Done = reply else {
        return Err(reply);
    };
    responder.xml(200, out, |body| {
        settings_xml::service_stats_into(body, responder.now_ms())
    });
    Ok(())
}

/// Issues a user delegation key for the identity of the request's bearer token (authentication
/// made sure there is one, with an object and a tenant), valid from `Start` (now when absent)
/// to `Expiry`, both cut to whole seconds. The expiry must come after the start and after now,
/// and at most `USER_DELEGATION_KEY_LIFETIME_MS_MAX` from now: otherwise 400
/// `InvalidXmlNodeValue`, as the service answers a key of more than seven days. Nothing is
/// stored: the key is derived from the account key (`auth::delegation`).
pub fn get_user_delegation_key(planning: &Planning<'_, '_>) -> Result<(Step, Echo), StorageError> {
    let key_info = delegation_xml::key_info(&planning.request.body)?;
    let now_ms = planning.now_ms;
    let start_ms = key_info.start_ms.unwrap_or(now_ms) / 1000 * 1000;
    let expiry_ms = key_info.expiry_ms / 1000 * 1000;
    if expiry_ms <= start_ms
        || expiry_ms <= now_ms
        || expiry_ms > now_ms.saturating_add(USER_DELEGATION_KEY_LIFETIME_MS_MAX)
    {
        return Err(StorageError::InvalidXmlNodeValue);
    }
    let identity = planning
        .request
        .header("authorization")
        .and_then(bearer_token)
        .and_then(bearer::identity)
        .unwrap_or_default();
    let (Some(object_id), Some(tenant_id)) = (identity.object_id, identity.tenant_id) else {
        return Err(StorageError::AuthenticationFailed);
    };
    let account = planning
        .accounts
        .get(planning.route.account)
        .ok_or(StorageError::ResourceNotFound)?;
    let version = planning
        .request
        .header_str("x-ms-version")
        .unwrap_or(API_VERSION_LATEST);
    let key = UserDelegationKey::issue(
        account,
        object_id,
        tenant_id,
        (start_ms, expiry_ms),
        version.to_string(),
        key_info.delegated_user_tid,
    );
    Ok((
        Step::Answer(Reply::Done),
        Echo::DelegationKey(Box::new(key)),
    ))
}

/// 200 with the `UserDelegationKey` planning made.
pub fn get_user_delegation_key_response(
    responder: &Responder<'_>,
    echo: &Echo,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    let (Reply::Done, Echo::DelegationKey(key)) = (&reply, echo) else {
        return Err(reply);
    };
    responder.xml(200, out, |body| {
        delegation_xml::user_delegation_key_into(body, key)
    });
    Ok(())
}

/// Every shard lists its part; the response merges them.
pub fn list_queues(planning: &Planning<'_, '_>) -> Result<(Step, ListingEcho), StorageError> {
    let query = planning.query;
    // At least 1; larger than the page limit serves the limit, as Azure does.
    let results_max = validate::integer_parameter(query, "maxresults", 1..=i64::MAX)?
        .map_or(LIST_QUEUES_RESULTS_MAX, |value| {
            (value as usize).min(LIST_QUEUES_RESULTS_MAX)
        });
    let mut include_metadata = false;
    for item in query
        .get("include")
        .unwrap_or("")
        .split(',')
        .filter(|item| !item.is_empty())
    {
        if item.eq_ignore_ascii_case("metadata") {
            include_metadata = true;
        } else {
            return Err(StorageError::InvalidQueryParameterValue);
        }
    }
    let route = planning.route;
    let authority = planning.authority;
    let echo = ListingEcho {
        service_endpoint: if route.host_style {
            format!("http://{authority}/")
        } else {
            format!("http://{authority}/{}/", route.account)
        },
        prefix: query.get("prefix").map(str::to_string),
        marker: query.get("marker").map(str::to_string),
        results_max_text: query.get("maxresults").map(str::to_string),
        results_max,
    };
    let command = Command::ListQueues {
        account: route.account.to_string(),
        prefix: echo.prefix.clone().unwrap_or_default(),
        marker: echo.marker.clone().unwrap_or_default(),
        results_max,
        include_metadata,
    };
    Ok((Step::EveryShard(command), echo))
}

/// Merges every shard's part (each sorted, at most one page plus one): the first page by name,
/// and the name after it as `NextMarker`.
pub fn list_queues_response(
    responder: &Responder<'_>,
    echo: Option<&ListingEcho>,
    parts: Vec<Result<Reply, StorageError>>,
    out: &mut BytesMut,
) -> Written {
    let Some(echo) = echo else {
        return Err(Reply::Queues(Vec::new()));
    };
    let mut queues = Vec::new();
    for part in parts {
        match part {
            Ok(Reply::Queues(listings)) => queues.extend(listings),
            Ok(other) => return Err(other),
            Err(error) => {
                responder.error(error, out);
                return Ok(());
            }
        }
    }
    queues.sort_by(|left, right| left.name.cmp(&right.name));
    let next_marker =
        (queues.len() > echo.results_max).then(|| queues[echo.results_max].name.clone());
    queues.truncate(echo.results_max);
    responder.xml(200, out, |body| {
        xml::queue_list(
            body,
            &xml::QueueList {
                service_endpoint: &echo.service_endpoint,
                prefix: echo.prefix.as_deref(),
                marker: echo.marker.as_deref(),
                results_max: echo.results_max_text.as_deref(),
                queues: &queues,
                next_marker: next_marker.as_deref(),
            },
        )
    });
    Ok(())
}
