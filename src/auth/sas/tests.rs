//! Tests of `auth::sas`: parsing, strings-to-sign, verification and the cache of verified
//! signatures.

use super::*;
use crate::auth::test_support::development_accounts;
use crate::auth::SigningKey;
use crate::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};
use crate::limits::SAS_CACHE_ENTRIES_MAX;
use std::net::Ipv4Addr;

/// 2026-11-22T00:00:00Z and one hour, the window the contract's vectors sign.
const NOVEMBER_22_MS: u64 = 1_795_305_600_000;
const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;

/// What a table case expects of authentication, the principal aside.
type Outcome = Result<(), AuthFailure>;

const SERVICE_VECTOR: &str = "sv=2026-10-06&st=2026-11-22T00%3A00%3A00Z\
    &se=2026-11-23T00%3A00%3A00Z&sp=raup&spr=https%2Chttp\
    &sig=OxCNGzjOaDzj0ZT0SPbgS3%2BJKWc3Wl%2FKaXKcKzCQvTo%3D";
/// The SDK leaves `/` unescaped in `sig`. This vector carries no `spr` (the SDK set none).
const ACCOUNT_VECTOR: &str = "sv=2026-10-06&ss=q&srt=sco&sp=rwdlacup\
    &st=2026-11-22T00%3A00%3A00Z&se=2026-11-23T00%3A00%3A00Z\
    &sig=fwZjH/QMIpHkgAn4hsXNvttEDtucDoClV/pmmnt6anw%3D";

fn context(queue_name: Option<&'static str>) -> RequestContext<'static> {
    RequestContext {
        account_name: DEVELOPMENT_ACCOUNT_NAME,
        secondary: false,
        queue_name,
        now_ms: NOVEMBER_22_MS + HOUR_MS,
        client_ip: IpAddr::from([127, 0, 0, 1]),
        secure_transport: false,
    }
}

/// `query` decoded, as the api layer hands it over.
fn decoded(query: &str) -> Query<'_> {
    Query::parse(query.as_bytes()).expect("a well-formed query")
}

fn no_policy(_identifier: &str) -> Option<StoredPolicy> {
    None
}

/// Parses and verifies `query` with a fresh cache.
fn check(
    query: &str,
    context: &RequestContext<'_>,
    access: Access,
    stored_policy: &dyn Fn(&str) -> Option<StoredPolicy>,
) -> Result<Principal, AuthFailure> {
    let accounts = development_accounts();
    let account = accounts.get(DEVELOPMENT_ACCOUNT_NAME).unwrap();
    let decoded = decoded(query);
    let token = parse(&decoded)?.ok_or(AuthFailure::NoCredentials)?;
    let mut cache = SasCache::new(SAS_CACHE_ENTRIES_MAX);
    verify(
        &token,
        account,
        context,
        access,
        stored_policy,
        &mut cache,
        &mut Vec::new(),
    )
}

fn string_to_sign(query: &str, queue_name: Option<&str>) -> String {
    let decoded = decoded(query);
    let token = parse(&decoded).unwrap().unwrap();
    let mut out = Vec::new();
    write_string_to_sign(&token, DEVELOPMENT_ACCOUNT_NAME, queue_name, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// Signs `unsigned` (a query without `sig`) with the development key, as a client would,
/// for tests whose subject is a check other than the signature.
fn sign(unsigned: &str, queue_name: Option<&str>) -> String {
    let placeholder = format!("{unsigned}&sig={}=", "A".repeat(43));
    let sts = string_to_sign(&placeholder, queue_name);
    let key = SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).unwrap();
    let signature = key
        .sign_base64(sts.as_bytes())
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D");
    format!("{unsigned}&sig={signature}")
}

/// A user delegation SAS made by azure-storage-queue 12.18.1's `generate_queue_sas` with a
/// key whose value is the bytes 0..32 (its `sts_hook` gave the string-to-sign).
const DELEGATION_VECTOR: &str = "st=2026-11-22T00%3A00%3A00Z&se=2026-11-22T12%3A00%3A00Z\
    &sp=raup&sv=2026-10-06&skoid=23657296-5cd5-45b0-a809-d972a7f4dfe1\
    &sktid=ab1f708d-50f6-404c-a006-d71b2ac7a606&skt=2026-11-22T00%3A00%3A00Z\
    &ske=2026-11-23T00%3A00%3A00Z&sks=q&skv=2026-04-06\
    &sig=eaGJcgRCSIJe6EbSpSoDcSVRiznvKXmC4Xm7mNwcIB8%3D";

#[test]
fn user_delegation_sas_vector_from_the_python_sdk() {
    let sts = string_to_sign(DELEGATION_VECTOR, Some("myqueue"));
    assert_eq!(
        sts,
        "raup\n2026-11-22T00:00:00Z\n2026-11-22T12:00:00Z\n/queue/devstoreaccount1/myqueue\n\
         23657296-5cd5-45b0-a809-d972a7f4dfe1\nab1f708d-50f6-404c-a006-d71b2ac7a606\n\
         2026-11-22T00:00:00Z\n2026-11-23T00:00:00Z\nq\n2026-04-06\n\n\n\n\n2026-10-06"
    );
    // The SDK's signature over that string, under the key value 0..32: the string is the
    // SDK's to the byte.
    let key_value: Vec<u8> = (0..32).collect();
    let signature = hmac_sha256(&key_value, sts.as_bytes());
    let decoded = decoded(DELEGATION_VECTOR);
    assert_eq!(parse(&decoded).unwrap().unwrap().signature, signature);
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().into()
}

#[test]
fn user_delegation_sas_table() {
    // The key: valid from 2026-11-22 00:00 for a day; `context` is at 01:00.
    let key = "skoid=oid&sktid=tid&skt=2026-11-22T00:00:00Z&ske=2026-11-23T00:00:00Z\
        &skv=2026-04-06";
    let good = format!("sv=2026-10-06&sp=rp&se=2026-11-22T12:00:00Z&{key}&sks=q");
    let signed = sign_delegated(&good, "q");
    assert_eq!(
        check(
            &signed,
            &context(Some("q")),
            Access::PEEK_MESSAGES,
            &no_policy
        )
        .map(|principal| principal.scheme),
        Ok(AuthScheme::UserDelegationSas)
    );
    // The oldest `sv` with this layout, as the JavaScript SDK's live tests sign it.
    let oldest = sign_delegated(&good.replace("sv=2026-10-06", "sv=2025-07-05"), "q");
    assert_eq!(
        check(
            &oldest,
            &context(Some("q")),
            Access::PEEK_MESSAGES,
            &no_policy
        )
        .map(|principal| principal.scheme),
        Ok(AuthScheme::UserDelegationSas)
    );
    let mismatch = |outcome: Result<Principal, AuthFailure>| {
        matches!(outcome, Err(AuthFailure::SignatureMismatch { .. }))
    };
    // Any field altered after signing breaks the signature: the key's (it derives another
    // key), the grant's, the queue's.
    for (from, to) in [
        ("skoid=oid", "skoid=someone"),
        ("sktid=tid", "sktid=other"),
        ("ske=2026-11-23T00:00:00Z", "ske=2026-11-24T00:00:00Z"),
        ("skv=2026-04-06", "skv=2026-02-06"),
        ("sp=rp", "sp=raup"),
        ("se=2026-11-22T12:00:00Z", "se=2026-11-22T13:00:00Z"),
    ] {
        let tampered = signed.replace(from, to);
        assert!(
            mismatch(check(
                &tampered,
                &context(Some("q")),
                Access::PEEK_MESSAGES,
                &no_policy
            )),
            "{from} -> {to}"
        );
    }
    assert!(mismatch(check(
        &signed,
        &context(Some("other")),
        Access::PEEK_MESSAGES,
        &no_policy
    )));
    // Signed validly, refused for what it says: expired (without `st`, as an empty window).
    let mut late = context(Some("q"));
    late.now_ms = NOVEMBER_22_MS + 13 * HOUR_MS;
    assert!(matches!(
        check(&signed, &late, Access::PEEK_MESSAGES, &no_policy),
        Err(AuthFailure::SasTimesInverted(_))
    ));
    // A SAS outliving its key ends with the key.
    let long = sign_delegated(
        &good.replace("se=2026-11-22T12:00:00Z", "se=2026-11-30"),
        "q",
    );
    let mut after_key = context(Some("q"));
    after_key.now_ms = NOVEMBER_22_MS + DAY_MS;
    assert_eq!(
        check(&long, &after_key, Access::PEEK_MESSAGES, &no_policy),
        Err(AuthFailure::UserDelegationKeyNotValid(TimeFrame {
            start_ms: NOVEMBER_22_MS,
            expiry_ms: NOVEMBER_22_MS + DAY_MS,
            now_ms: NOVEMBER_22_MS + DAY_MS,
        }))
    );
    let mut before_key = context(Some("q"));
    before_key.now_ms = NOVEMBER_22_MS - 1;
    assert!(matches!(
        check(&signed, &before_key, Access::PEEK_MESSAGES, &no_policy),
        Err(AuthFailure::UserDelegationKeyNotValid(_))
    ));
    assert_eq!(
        check(
            &signed,
            &context(Some("q")),
            Access::PUT_MESSAGE,
            &no_policy
        ),
        Err(AuthFailure::PermissionMismatch)
    );
    assert_eq!(
        check(
            &signed,
            &context(Some("q")),
            Access::CREATE_QUEUE,
            &no_policy
        ),
        Err(AuthFailure::OperationNotAllowed)
    );
    let cases = [
        (
            sign_delegated(&good.replace("sks=q", "sks=b"), "q"),
            AuthFailure::UserDelegationKeyService,
        ),
        (
            sign_delegated(&format!("{good}&si=policy"), "q"),
            AuthFailure::UserDelegationWithPolicy,
        ),
        (
            good.replace("sv=2026-10-06", "sv=2025-05-05") + "&sig=SIG",
            AuthFailure::UserDelegationSasVersion,
        ),
        (
            good.replace("skoid=oid&", "") + "&sig=SIG",
            AuthFailure::MissingSasField("skoid"),
        ),
        (
            good.replace("skt=2026-11-22T00:00:00Z", "skt=now") + "&sig=SIG",
            AuthFailure::MalformedSas("skt"),
        ),
    ];
    let sig = "OxCNGzjOaDzj0ZT0SPbgS3%2BJKWc3Wl%2FKaXKcKzCQvTo%3D";
    for (query, expected) in cases {
        let query = query.replace("SIG", sig);
        assert_eq!(
            check(
                &query,
                &context(Some("q")),
                Access::PEEK_MESSAGES,
                &no_policy
            ),
            Err(expected),
            "{query}"
        );
    }
}

#[test]
fn service_sas_contract_vector() {
    assert_eq!(
        string_to_sign(SERVICE_VECTOR, Some("myqueue")),
        "raup\n2026-11-22T00:00:00Z\n2026-11-23T00:00:00Z\n/queue/devstoreaccount1/myqueue\
         \n\n\nhttps,http\n2026-10-06"
    );
    let principal = check(
        SERVICE_VECTOR,
        &context(Some("myqueue")),
        Access::PUT_MESSAGE,
        &no_policy,
    );
    assert_eq!(
        principal,
        Ok(Principal {
            scheme: AuthScheme::ServiceSas,
            key_index: 0
        })
    );
    // The signature binds the queue.
    assert!(matches!(
        check(
            SERVICE_VECTOR,
            &context(Some("otherqueue")),
            Access::PUT_MESSAGE,
            &no_policy
        ),
        Err(AuthFailure::SignatureMismatch { .. })
    ));
}

#[test]
fn account_sas_contract_vector() {
    assert_eq!(
        string_to_sign(ACCOUNT_VECTOR, None),
        "devstoreaccount1\nrwdlacup\nq\nsco\n2026-11-22T00:00:00Z\n2026-11-23T00:00:00Z\
         \n\n\n2026-10-06\n\n"
    );
    for (access, queue_name) in [
        (Access::LIST_QUEUES, None),
        (Access::CREATE_QUEUE, Some("myqueue")),
        (Access::GET_MESSAGES, Some("myqueue")),
    ] {
        assert_eq!(
            check(ACCOUNT_VECTOR, &context(queue_name), access, &no_policy),
            Ok(Principal {
                scheme: AuthScheme::AccountSas,
                key_index: 0
            })
        );
    }
}

/// The layout before 2020-12-06 has no `ses` line. Signature computed independently with
/// Python's `hmac` over the string below.
#[test]
fn account_sas_layout_before_encryption_scope() {
    let query = "sv=2019-12-12&ss=q&srt=o&sp=raup&st=2026-11-22T00:00:00Z\
        &se=2026-11-23T00:00:00Z&spr=https,http\
        &sig=uaFlGvFsToi3fxY6KrUrxsKTnev%2ByYLB7Svpc5QMbes%3D";
    assert_eq!(
        string_to_sign(query, None),
        "devstoreaccount1\nraup\nq\no\n2026-11-22T00:00:00Z\n2026-11-23T00:00:00Z\
         \n\nhttps,http\n2019-12-12\n"
    );
    assert!(check(query, &context(Some("q")), Access::PUT_MESSAGE, &no_policy).is_ok());
    // `ses` is signed from 2020-12-06 on, and then only the signer's value verifies.
    let with_scope = sign(
        "sv=2020-12-06&ss=q&srt=o&sp=a&se=2026-11-23&ses=scope1",
        None,
    );
    assert!(string_to_sign(&with_scope, None).ends_with("\n2020-12-06\nscope1\n"));
    assert!(check(
        &with_scope,
        &context(Some("q")),
        Access::PUT_MESSAGE,
        &no_policy
    )
    .is_ok());
    let swapped_scope = with_scope.replace("ses=scope1", "ses=scope2");
    assert!(matches!(
        check(
            &swapped_scope,
            &context(Some("q")),
            Access::PUT_MESSAGE,
            &no_policy
        ),
        Err(AuthFailure::SignatureMismatch { .. })
    ));
}

#[test]
fn parse_reads_every_field() {
    let query = "comp=list&sv=2026-10-06&ss=bq&srt=sco&sp=rl&st=2026-11-22&se=2026-11-23T00:00Z\
        &sip=10.0.0.1-10.0.0.9&spr=https&ses=scope&si=policy&timeout=30\
        &sig=fwZjH/QMIpHkgAn4hsXNvttEDtucDoClV/pmmnt6anw%3D";
    let decoded = decoded(query);
    let token = parse(&decoded).unwrap().unwrap();
    assert_eq!(
        token.kind,
        SasKind::Account {
            services: PermissionSet::from_letters("qb"),
            resource_types: PermissionSet::from_letters("osc"),
        }
    );
    assert_eq!(token.start_ms, Some(NOVEMBER_22_MS));
    assert_eq!(token.expiry_ms, Some(NOVEMBER_22_MS + DAY_MS));
    assert_eq!(token.permissions, Some(PermissionSet::from_letters("lr")));
    assert_eq!(token.ip_range, IpRange::parse("10.0.0.1-10.0.0.9"));
    assert_eq!(
        token.protocols,
        AllowedProtocols {
            http: false,
            https: true
        }
    );
    assert_eq!(token.fields.signed_encryption_scope, Some("scope"));
    assert_eq!(token.fields.signed_identifier, Some("policy"));
}

#[test]
fn parse_without_sas_is_none() {
    for query in [
        "",
        "comp=list",
        "numofmessages=2&peekonly=true",
        "sig=",
        "sv=2026-10-06&sp=r",
    ] {
        assert_eq!(parse(&decoded(query)), Ok(None), "{query}");
    }
}

#[test]
fn parse_malformed_table() {
    // `SIG` stands for a well-formed signature.
    let sig = "sig=OxCNGzjOaDzj0ZT0SPbgS3%2BJKWc3Wl%2FKaXKcKzCQvTo%3D";
    let malformed = AuthFailure::MalformedSas;
    #[rustfmt::skip]
    let cases = [
        ("sv=2026-10-06&ss=q&srt=o&sp=r&se=2026-11-23", AuthFailure::MissingSasField("sig")),
        ("sv=2026-10-06&sp=r&se=2026-11-23&sig=not*base64", malformed("sig")),
        ("sv=2026-10-06&sp=r&se=2026-11-23&sig=YWJj", malformed("sig")),
        ("sv=2026-10-06&sp=r&se=2026-11-23&SIG&SIG", malformed("sig")),
        ("sp=r&se=2026-11-23&SIG", AuthFailure::MissingSasField("sv")),
        ("sv=latest&sp=r&se=2026-11-23&SIG", malformed("sv")),
        ("sv=2026-1-06&sp=r&se=2026-11-23&SIG", malformed("sv")),
        ("sv=2014-02-14&sp=r&se=2026-11-23&SIG", AuthFailure::UnsupportedSasVersion),
        ("sv=2013-08-15&ss=q&srt=o&sp=r&SIG", AuthFailure::UnsupportedSasVersion),
        ("sv=2026-10-06&ss=q&sp=r&se=2026-11-23&SIG", malformed("srt")),
        ("sv=2026-10-06&srt=o&sp=r&se=2026-11-23&SIG", malformed("ss")),
        ("sv=2026-10-06&ss=Q&srt=o&sp=r&se=2026-11-23&SIG", malformed("ss")),
        ("sv=2026-10-06&ss=q&srt=o!&sp=r&se=2026-11-23&SIG", malformed("srt")),
        ("sv=2026-10-06&sp=R&se=2026-11-23&SIG", malformed("sp")),
        ("sv=2026-10-06&sp=r&se=tomorrow&SIG", malformed("se")),
        ("sv=2026-10-06&sp=r&se=2026-11-31&SIG", malformed("se")),
        ("sv=2026-10-06&sp=r&st=2026-11-22T00:00:00&se=2026-11-23&SIG", malformed("st")),
        ("sv=2026-10-06&sp=r&se=2026-11-23&sip=10.0.0.300&SIG", malformed("sip")),
        ("sv=2026-10-06&sp=r&se=2026-11-23&sip=10.0.0.9-10.0.0.1&SIG", malformed("sip")),
        ("sv=2026-10-06&sp=r&se=2026-11-23&sip=10.0.0.1-%3A%3A1&SIG", malformed("sip")),
        ("sv=2026-10-06&sp=r&se=2026-11-23&sip=10.0.0.1-2-3&SIG", malformed("sip")),
        ("sv=2026-10-06&sp=r&se=2026-11-23&spr=ftp&SIG", malformed("spr")),
        ("sv=2026-10-06&sp=r&se=2026-11-23&spr=https%2C&SIG", malformed("spr")),
    ];
    for (query, expected) in cases {
        let query = query.replace("SIG", sig);
        assert_eq!(
            parse(&decoded(&query)).map(|_| ()),
            Err(expected),
            "{query}"
        );
    }
}

/// Some clients send `+` in `sig` unescaped; query decoding makes it a space.
#[test]
fn unescaped_plus_in_signature_is_read_as_plus() {
    let query = SERVICE_VECTOR.replace("%2B", "+");
    assert!(check(
        &query,
        &context(Some("myqueue")),
        Access::PUT_MESSAGE,
        &no_policy
    )
    .is_ok());
}

#[test]
fn required_fields_table() {
    let cases = [
        (
            "sv=2026-10-06&ss=q&srt=o&se=2026-11-23",
            AuthFailure::MissingSasField("sp"),
        ),
        (
            "sv=2026-10-06&ss=q&srt=o&sp=r",
            AuthFailure::MissingSasField("se"),
        ),
        (
            "sv=2026-10-06&se=2026-11-23",
            AuthFailure::MissingSasField("sp"),
        ),
        ("sv=2026-10-06&sp=r", AuthFailure::MissingSasField("se")),
    ];
    for (unsigned, expected) in cases {
        let query = sign(unsigned, Some("q"));
        assert_eq!(
            check(
                &query,
                &context(Some("q")),
                Access::PEEK_MESSAGES,
                &no_policy
            ),
            Err(expected),
            "{unsigned}"
        );
    }
}

#[test]
fn time_window_table() {
    let query = sign(
        "sv=2026-10-06&ss=q&srt=o&sp=r&st=2026-11-22T00:00:00Z&se=2026-11-23",
        None,
    );
    let at = |now_ms| TimeFrame {
        start_ms: NOVEMBER_22_MS,
        expiry_ms: NOVEMBER_22_MS + DAY_MS,
        now_ms,
    };
    let cases = [
        (
            NOVEMBER_22_MS - 1,
            Err(AuthFailure::SasNotYetValid(at(NOVEMBER_22_MS - 1))),
        ),
        (NOVEMBER_22_MS, Ok(())),
        (NOVEMBER_22_MS + DAY_MS - 1, Ok(())),
        (
            NOVEMBER_22_MS + DAY_MS,
            Err(AuthFailure::SasExpired(at(NOVEMBER_22_MS + DAY_MS))),
        ),
        (
            NOVEMBER_22_MS + 2 * DAY_MS,
            Err(AuthFailure::SasExpired(at(NOVEMBER_22_MS + 2 * DAY_MS))),
        ),
    ];
    for (now_ms, expected) in cases {
        let mut at = context(Some("q"));
        at.now_ms = now_ms;
        assert_eq!(
            check(&query, &at, Access::PEEK_MESSAGES, &no_policy).map(|_| ()),
            expected,
            "{now_ms}"
        );
    }
    // Without `st` the token is valid from any past instant.
    let open_start = sign("sv=2026-10-06&ss=q&srt=o&sp=r&se=2026-11-23", None);
    let mut early = context(Some("q"));
    early.now_ms = 0;
    assert!(check(&open_start, &early, Access::PEEK_MESSAGES, &no_policy).is_ok());
    // Expired without `st`: the service says the expiry is not after the start, now ("create
    // queue with invalid SAS should fail" in the JavaScript SDK's live tests).
    for now_ms in [NOVEMBER_22_MS + DAY_MS, NOVEMBER_22_MS + 2 * DAY_MS] {
        let mut late = context(Some("q"));
        late.now_ms = now_ms;
        assert_eq!(
            check(&open_start, &late, Access::PEEK_MESSAGES, &no_policy),
            Err(AuthFailure::SasTimesInverted(TimeFrame {
                start_ms: now_ms,
                expiry_ms: NOVEMBER_22_MS + DAY_MS,
                now_ms,
            }))
        );
    }
    // An expiry that is not after the start is refused whatever the time.
    let inverted = sign(
        "sv=2026-10-06&ss=q&srt=o&sp=r&st=2026-11-23&se=2026-11-22",
        None,
    );
    assert_eq!(
        check(&inverted, &early, Access::PEEK_MESSAGES, &no_policy),
        Err(AuthFailure::SasTimesInverted(TimeFrame {
            start_ms: NOVEMBER_22_MS + DAY_MS,
            expiry_ms: NOVEMBER_22_MS,
            now_ms: 0,
        }))
    );
}

#[test]
fn protocol_table() {
    let cases = [
        ("", false, true),
        ("", true, true),
        ("&spr=https", false, false),
        ("&spr=https", true, true),
        ("&spr=https,http", false, true),
        ("&spr=http,https", true, true),
        ("&spr=http", true, false),
    ];
    for (protocol, secure_transport, allowed) in cases {
        let query = sign(
            &format!("sv=2026-10-06&ss=q&srt=o&sp=r&se=2026-11-23{protocol}"),
            None,
        );
        let mut over = context(Some("q"));
        over.secure_transport = secure_transport;
        let expected = if allowed {
            Ok(())
        } else {
            Err(AuthFailure::ProtocolMismatch)
        };
        assert_eq!(
            check(&query, &over, Access::PEEK_MESSAGES, &no_policy).map(|_| ()),
            expected,
            "{protocol} secure={secure_transport}"
        );
    }
}

#[test]
fn source_ip_table() {
    let mapped = |address: [u8; 4]| IpAddr::from(Ipv4Addr::from(address).to_ipv6_mapped());
    #[rustfmt::skip]
    let cases: &[(&str, IpAddr, bool)] = &[
        ("127.0.0.1", IpAddr::from([127, 0, 0, 1]), true),
        ("127.0.0.1", IpAddr::from([127, 0, 0, 2]), false),
        ("10.0.0.1-10.0.0.9", IpAddr::from([10, 0, 0, 1]), true),
        ("10.0.0.1-10.0.0.9", IpAddr::from([10, 0, 0, 5]), true),
        ("10.0.0.1-10.0.0.9", IpAddr::from([10, 0, 0, 9]), true),
        ("10.0.0.1-10.0.0.9", IpAddr::from([10, 0, 0, 10]), false),
        ("10.0.0.1-10.0.0.9", IpAddr::from([10, 0, 0, 0]), false),
        ("10.0.0.1-10.0.0.9", IpAddr::from([9, 255, 255, 255]), false),
        ("10.0.0.1-10.0.0.9", mapped([10, 0, 0, 5]), true),
        ("10.0.0.1-10.0.0.9", mapped([10, 0, 1, 5]), false),
        ("::1", "::1".parse().unwrap(), true),
        ("::1", IpAddr::from([127, 0, 0, 1]), false),
        ("2001:db8::1-2001:db8::ff", "2001:db8::80".parse().unwrap(), true),
        ("2001:db8::1-2001:db8::ff", "2001:db8::100".parse().unwrap(), false),
        ("2001:db8::1-2001:db8::ff", IpAddr::from([10, 0, 0, 5]), false),
        ("::ffff:10.0.0.1-::ffff:10.0.0.9", IpAddr::from([10, 0, 0, 5]), true),
    ];
    for &(range, client_ip, allowed) in cases {
        let query = sign(
            &format!("sv=2026-10-06&ss=q&srt=o&sp=r&se=2026-11-23&sip={range}"),
            None,
        );
        let mut from = context(Some("q"));
        from.client_ip = client_ip;
        let expected = if allowed {
            Ok(())
        } else {
            Err(AuthFailure::SourceIpMismatch)
        };
        assert_eq!(
            check(&query, &from, Access::PEEK_MESSAGES, &no_policy).map(|_| ()),
            expected,
            "{range} vs {client_ip}"
        );
    }
}

#[test]
fn account_sas_authorization_table() {
    use AuthFailure::{
        OperationNotAllowed, PermissionMismatch, ResourceTypeMismatch, ServiceMismatch,
    };
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str, Access, Outcome)] = &[
        ("q", "o", "a", Access::PUT_MESSAGE, Ok(())),
        ("bt", "o", "a", Access::PUT_MESSAGE, Err(ServiceMismatch)),
        ("q", "sc", "a", Access::PUT_MESSAGE, Err(ResourceTypeMismatch)),
        ("q", "o", "rp", Access::PUT_MESSAGE, Err(PermissionMismatch)),
        ("q", "c", "c", Access::CREATE_QUEUE, Ok(())),
        ("q", "c", "w", Access::CREATE_QUEUE, Ok(())),
        ("q", "c", "r", Access::CREATE_QUEUE, Err(PermissionMismatch)),
        ("q", "s", "l", Access::LIST_QUEUES, Ok(())),
        ("q", "o", "l", Access::LIST_QUEUES, Err(ResourceTypeMismatch)),
        ("q", "s", "r", Access::GET_SERVICE_PROPERTIES, Ok(())),
        ("q", "s", "w", Access::SET_SERVICE_PROPERTIES, Ok(())),
        ("q", "s", "r", Access::GET_SERVICE_STATS, Ok(())),
        ("q", "c", "d", Access::DELETE_QUEUE, Ok(())),
        ("q", "c", "r", Access::GET_QUEUE_METADATA, Ok(())),
        ("q", "c", "w", Access::SET_QUEUE_METADATA, Ok(())),
        // Stored access policies are the account owner's alone: no `sp` reaches them.
        ("q", "c", "rwdlacup", Access::GET_QUEUE_ACL, Err(OperationNotAllowed)),
        ("q", "sco", "rwdlacup", Access::SET_QUEUE_ACL, Err(OperationNotAllowed)),
        ("q", "o", "rwdlacup", Access::GET_QUEUE_ACL, Err(ResourceTypeMismatch)),
        ("q", "c", "d", Access::CLEAR_MESSAGES, Ok(())),
        ("q", "o", "a", Access::PUT_MESSAGE, Ok(())),
        ("q", "o", "p", Access::GET_MESSAGES, Ok(())),
        ("q", "o", "r", Access::PEEK_MESSAGES, Ok(())),
        ("q", "o", "u", Access::UPDATE_MESSAGE, Ok(())),
        ("q", "o", "p", Access::DELETE_MESSAGE, Ok(())),
        ("q", "o", "r", Access::GET_MESSAGES, Err(PermissionMismatch)),
        ("q", "c", "r", Access::DELETE_QUEUE, Err(PermissionMismatch)),
        ("q", "o", "d", Access::CLEAR_MESSAGES, Err(ResourceTypeMismatch)),
    ];
    for (services, resource_types, permissions, access, expected) in cases {
        let query = sign(
            &format!(
                "sv=2026-10-06&ss={services}&srt={resource_types}&sp={permissions}&se=2026-11-23"
            ),
            None,
        );
        assert_eq!(
            &check(&query, &context(Some("q")), *access, &no_policy).map(|_| ()),
            expected,
            "ss={services} srt={resource_types} sp={permissions} {access:?}"
        );
    }
}

#[test]
fn service_sas_authorization_table() {
    use AuthFailure::{OperationNotAllowed, PermissionMismatch};
    #[rustfmt::skip]
    let cases: &[(&str, Access, Outcome)] = &[
        ("r", Access::PEEK_MESSAGES, Ok(())),
        ("r", Access::GET_QUEUE_METADATA, Ok(())),
        ("a", Access::PUT_MESSAGE, Ok(())),
        ("u", Access::UPDATE_MESSAGE, Ok(())),
        ("p", Access::GET_MESSAGES, Ok(())),
        ("p", Access::DELETE_MESSAGE, Ok(())),
        ("r", Access::GET_MESSAGES, Err(PermissionMismatch)),
        ("aup", Access::PEEK_MESSAGES, Err(PermissionMismatch)),
        // No service SAS permission covers queue management (Azure/Azurite#662: the
        // service answers a service SAS creating a queue with AuthorizationFailure).
        ("raup", Access::CLEAR_MESSAGES, Err(OperationNotAllowed)),
        ("raup", Access::SET_QUEUE_METADATA, Err(OperationNotAllowed)),
        ("raup", Access::DELETE_QUEUE, Err(OperationNotAllowed)),
        ("raup", Access::CREATE_QUEUE, Err(OperationNotAllowed)),
        ("raup", Access::GET_QUEUE_ACL, Err(OperationNotAllowed)),
        ("raup", Access::SET_QUEUE_ACL, Err(OperationNotAllowed)),
    ];
    for (permissions, access, expected) in cases {
        let query = sign(
            &format!("sv=2026-10-06&sp={permissions}&se=2026-11-23"),
            Some("q"),
        );
        assert_eq!(
            &check(&query, &context(Some("q")), *access, &no_policy).map(|_| ()),
            expected,
            "sp={permissions} {access:?}"
        );
    }
    // A service SAS names a queue; on an account-level URL it cannot verify.
    let query = sign("sv=2026-10-06&sp=r&se=2026-11-23", Some("q"));
    assert_eq!(
        check(&query, &context(None), Access::LIST_QUEUES, &no_policy),
        Err(AuthFailure::ServiceSasWithoutQueue)
    );
}

#[test]
fn stored_policy_table() {
    let full_policy = StoredPolicy {
        start_ms: Some(NOVEMBER_22_MS),
        expiry_ms: Some(NOVEMBER_22_MS + DAY_MS),
        permissions: PermissionSet::parse("rp"),
    };
    let expiry_only = StoredPolicy {
        expiry_ms: Some(NOVEMBER_22_MS + DAY_MS),
        ..StoredPolicy::default()
    };
    let expired = StoredPolicy {
        expiry_ms: Some(NOVEMBER_22_MS),
        ..full_policy
    };
    use AuthFailure::{MissingSasField, StoredPolicyConflict};
    #[rustfmt::skip]
    let cases: &[(&str, Option<StoredPolicy>, Outcome)] = &[
        ("si=pol", Some(full_policy), Ok(())),
        ("si=pol&sp=r", Some(expiry_only), Ok(())),
        ("si=pol&sp=r&st=2026-11-22", Some(expiry_only), Ok(())),
        ("si=pol&sp=a", Some(expiry_only), Err(AuthFailure::PermissionMismatch)),
        ("si=pol", Some(expiry_only), Err(MissingSasField("sp"))),
        ("si=pol&sp=r", Some(StoredPolicy::default()), Err(MissingSasField("se"))),
        ("si=pol&sp=r", Some(full_policy), Err(StoredPolicyConflict("sp"))),
        ("si=pol&se=2026-11-23", Some(full_policy), Err(StoredPolicyConflict("se"))),
        ("si=pol&st=2026-11-22", Some(full_policy), Err(StoredPolicyConflict("st"))),
        ("si=pol", Some(expired), Err(AuthFailure::SasTimesInverted(TimeFrame {
            start_ms: NOVEMBER_22_MS,
            expiry_ms: NOVEMBER_22_MS,
            now_ms: NOVEMBER_22_MS + HOUR_MS,
        }))),
        // Revocable (`si`) and without a start: an expired window is only expired.
        ("si=pol", Some(StoredPolicy { start_ms: None, ..expired }),
            Err(AuthFailure::SasExpired(TimeFrame {
                start_ms: NOVEMBER_22_MS + HOUR_MS,
                expiry_ms: NOVEMBER_22_MS,
                now_ms: NOVEMBER_22_MS + HOUR_MS,
            }))),
        ("si=other", None, Err(AuthFailure::StoredPolicyNotFound)),
    ];
    for (fields, policy, expected) in cases {
        let query = sign(&format!("sv=2026-10-06&{fields}"), Some("q"));
        let asked = std::cell::Cell::new(0);
        let lookup = |identifier: &str| {
            asked.set(asked.get() + 1);
            policy.filter(|_| identifier == "pol")
        };
        assert_eq!(
            &check(&query, &context(Some("q")), Access::PEEK_MESSAGES, &lookup).map(|_| ()),
            expected,
            "{fields}"
        );
        assert_eq!(asked.get(), 1, "{fields}");
    }
    // The identifier is signed: a different policy name breaks the signature.
    let query = sign("sv=2026-10-06&si=pol", Some("q")).replace("si=pol", "si=pol2");
    assert!(matches!(
        check(
            &query,
            &context(Some("q")),
            Access::PEEK_MESSAGES,
            &|_: &str| Some(full_policy)
        ),
        Err(AuthFailure::SignatureMismatch { .. })
    ));
}

#[test]
fn cache_hit_gives_the_same_outcome_and_still_checks_time() {
    let accounts = development_accounts();
    let account = accounts.get(DEVELOPMENT_ACCOUNT_NAME).unwrap();
    let mut cache = SasCache::new(SAS_CACHE_ENTRIES_MAX);
    let mut scratch = Vec::new();
    let vector = decoded(SERVICE_VECTOR);
    let token = parse(&vector).unwrap().unwrap();
    let mut run = |context: &RequestContext<'_>, cache: &mut SasCache| {
        verify(
            &token,
            account,
            context,
            Access::PEEK_MESSAGES,
            &no_policy,
            cache,
            &mut scratch,
        )
    };
    let first = run(&context(Some("myqueue")), &mut cache);
    assert!(first.is_ok());
    assert_eq!(cache.entry_count(), 1);
    assert_eq!(run(&context(Some("myqueue")), &mut cache), first);
    assert_eq!(cache.entry_count(), 1);

    let mut later = context(Some("myqueue"));
    later.now_ms = NOVEMBER_22_MS + DAY_MS;
    assert!(matches!(
        run(&later, &mut cache),
        Err(AuthFailure::SasExpired(_))
    ));
    let mut earlier = context(Some("myqueue"));
    earlier.now_ms = NOVEMBER_22_MS - 1;
    assert!(matches!(
        run(&earlier, &mut cache),
        Err(AuthFailure::SasNotYetValid(_))
    ));

    // A forged signature over the same fields misses the cache and fails.
    let forged_query = SERVICE_VECTOR.replace("OxCNGzjOaDzj0ZT0SPbgS3", "AxCNGzjOaDzj0ZT0SPbgS3");
    let forged_decoded = decoded(&forged_query);
    let forged = parse(&forged_decoded).unwrap().unwrap();
    assert!(matches!(
        verify(
            &forged,
            account,
            &context(Some("myqueue")),
            Access::PEEK_MESSAGES,
            &no_policy,
            &mut cache,
            &mut Vec::new()
        ),
        Err(AuthFailure::SignatureMismatch { .. })
    ));
    assert_eq!(cache.entry_count(), 1);
}

#[test]
fn cache_is_bounded_and_keeps_entries_in_use() {
    let mut cache = SasCache::new(8);
    cache.insert(b"hot", 0);
    for round in 0..100_u32 {
        cache.insert(&round.to_le_bytes(), 1);
        assert!(cache.entry_count() <= 8);
        assert_eq!(cache.get(b"hot"), Some(0), "round {round}");
    }
    assert_eq!(cache.get(&0_u32.to_le_bytes()), None);
    assert_eq!(cache.get(&99_u32.to_le_bytes()), Some(1));
    // Keys too long to be worth remembering are not stored.
    cache.insert(&[7; SAS_CACHE_KEY_BYTES_MAX + 1], 0);
    assert_eq!(cache.get(&[7; SAS_CACHE_KEY_BYTES_MAX + 1]), None);
}

#[test]
fn permission_set_table() {
    let set = PermissionSet::from_letters("raup");
    assert!(set.contains('r') && set.contains('p'));
    assert!(!set.contains('d') && !set.contains('R') && !set.contains('1'));
    assert!(set.intersects(PermissionSet::from_letters("dp")));
    assert!(!set.intersects(PermissionSet::from_letters("cwdl")));
    assert_eq!(PermissionSet::parse("puar"), Some(set));
    assert_eq!(PermissionSet::parse("rr"), PermissionSet::parse("r"));
    assert_eq!(PermissionSet::parse(""), Some(PermissionSet::default()));
    assert_eq!(PermissionSet::parse("r,a"), None);
    assert_eq!(PermissionSet::parse("é"), None);
}

/// `unsigned` (a user delegation SAS's fields, query-encoded) signed for `queue_name` as a
/// client signs it, with the key azq issues for its `sk…` fields (`auth::tests` uses it too).
pub(in crate::auth) fn sign_delegated(unsigned: &str, queue_name: &str) -> String {
    let placeholder = format!("{unsigned}&sig={}=", "A".repeat(43));
    let query = crate::http::Query::parse(placeholder.as_bytes()).unwrap();
    let token = parse(&query).unwrap().unwrap();
    let key = token
        .delegation_key()
        .unwrap_or_else(|| panic!("not a user delegation SAS: {unsigned}"));
    let mut string_to_sign = Vec::new();
    write_string_to_sign(
        &token,
        DEVELOPMENT_ACCOUNT_NAME,
        Some(queue_name),
        &mut string_to_sign,
    )
    .unwrap();
    let signature = delegation::client_signature_base64(
        &SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).unwrap(),
        &key,
        &string_to_sign,
    );
    let signature = signature
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D");
    format!("{unsigned}&sig={signature}")
}
