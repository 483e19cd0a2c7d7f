//! Keys on the client's IP address over real HTTP on 127.0.0.1: the peer
//! from axum's ConnectInfo, and the client behind trusted proxies, where a
//! spoofed X-Forwarded-For from an untrusted peer must change nothing.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use axum::routing::get;
use shuffle_limiter::tower::{ClientIp, ProxyHeader, RateLimitLayer, TenantKey};

#[path = "support/http.rs"]
mod http;
use http::{Limiter, client, limiter, serve, serve_with_peer};

const LOCALHOST: [u8; 4] = [127, 0, 0, 1];

fn peer() -> ClientIp {
    ClientIp::peer(|c: &ConnectInfo<SocketAddr>| c.0)
}

async fn app_url(limiter: &Limiter, ip: ClientIp) -> String {
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(
            Arc::clone(limiter),
            TenantKey::client_ip(ip),
        ));
    format!("http://{}/", serve_with_peer(app).await)
}

#[tokio::test]
async fn the_peer_address_is_the_key() {
    let limiter = limiter();
    let url = app_url(&limiter, peer()).await;
    let client = client();
    for left in (0..4).rev() {
        assert_eq!(
            client.get(&url).send().await.unwrap().status(),
            StatusCode::OK
        );
        assert_eq!(limiter.remaining(&LOCALHOST), left);
    }
    let denied = client.get(&url).send().await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn without_connect_info_the_answer_is_a_500_not_a_400() {
    let limiter = limiter();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limiter, TenantKey::client_ip(peer())));
    let url = format!("http://{}/", serve(app).await); // no connect info
    let reply = client().get(&url).send().await.unwrap();
    assert_eq!(reply.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!reply.headers().contains_key("ratelimit"));
}

#[tokio::test]
async fn a_spoofed_forwarded_for_from_an_untrusted_peer_is_ignored() {
    // No proxy trusted, then one that is not our peer: either way the
    // headers are the client's word, and it is charged as 127.0.0.1.
    let untrusted =
        peer().trust_proxies(ProxyHeader::XForwardedFor, ["10.0.0.0/8".parse().unwrap()]);
    for ip in [peer(), untrusted] {
        let limiter = limiter();
        let url = app_url(&limiter, ip).await;
        let client = client();
        for i in 0..4 {
            let reply = client
                .get(&url)
                .header("x-forwarded-for", format!("198.51.100.{i}"))
                .header("x-real-ip", format!("203.0.113.{i}"))
                .header("forwarded", format!("for=192.0.2.{i}"))
                .send()
                .await
                .unwrap();
            assert_eq!(reply.status(), StatusCode::OK);
        }
        assert_eq!(limiter.remaining(&LOCALHOST), 0);
        let spoofed = client
            .get(&url)
            .header("x-forwarded-for", "198.51.100.99")
            .send()
            .await
            .unwrap();
        assert_eq!(spoofed.status(), StatusCode::TOO_MANY_REQUESTS);
    }
}

/// Sends one request with `name: value` and checks that `key` paid for it.
async fn charged(limiter: &Limiter, url: &str, name: &str, value: &str, key: &[u8]) {
    let before = limiter.remaining(key);
    let reply = client().get(url).header(name, value).send().await.unwrap();
    assert_eq!(reply.status(), StatusCode::OK, "{name}: {value}");
    assert_eq!(
        limiter.remaining(key),
        before - 1,
        "{name}: {value} pays as {key:?}"
    );
}

/// Trusts our peer (127.0.0.1) and 10.0.0.0/8, and reads `header`.
fn behind_proxies(header: ProxyHeader) -> ClientIp {
    peer().trust_proxies(
        header,
        ["127.0.0.1".parse().unwrap(), "10.0.0.0/8".parse().unwrap()],
    )
}

#[tokio::test]
async fn behind_trusted_proxies_the_client_is_found_from_the_right() {
    let limiter = limiter();
    let url = app_url(&limiter, behind_proxies(ProxyHeader::XForwardedFor)).await;
    // The leftmost entry is whatever the client sent: it is not believed.
    let xff = "6.6.6.6, 198.51.100.7, 10.0.0.3";
    charged(&limiter, &url, "x-forwarded-for", xff, &[198, 51, 100, 7]).await;
    // A hop that does not parse stops the walk at the proxy that wrote it.
    let unknown = "unknown, 10.0.0.3";
    charged(&limiter, &url, "x-forwarded-for", unknown, &[10, 0, 0, 3]).await;
    // Without the header, the trusted peer is the client.
    charged(&limiter, &url, "x-real-ip", "203.0.113.5", &LOCALHOST).await;

    let url = app_url(&limiter, behind_proxies(ProxyHeader::XRealIp)).await;
    let real_ip = "203.0.113.5";
    charged(&limiter, &url, "x-real-ip", real_ip, &[203, 0, 113, 5]).await;

    // Forwarded (RFC 7239), IPv6 with a port, grouped by /64.
    let url = app_url(&limiter, behind_proxies(ProxyHeader::Forwarded)).await;
    let net: Ipv6Addr = "2001:db8:cafe:1::".parse().unwrap();
    let forwarded = r#"for=192.0.2.60;proto=http, for="[2001:db8:cafe:1::17]:4711""#;
    charged(&limiter, &url, "forwarded", forwarded, &net.octets()).await;
    let same_net = r#"for="[2001:db8:cafe:1:ffff::9]""#;
    charged(&limiter, &url, "forwarded", same_net, &net.octets()).await;

    // A header of the proxy's own.
    let cdn = ProxyHeader::Other(axum::http::HeaderName::from_static("cf-connecting-ip"));
    let url = app_url(&limiter, behind_proxies(cdn)).await;
    let client = "198.51.100.8";
    charged(
        &limiter,
        &url,
        "cf-connecting-ip",
        client,
        &[198, 51, 100, 8],
    )
    .await;
}

#[tokio::test]
async fn prefixes_group_addresses_and_are_checked() {
    let limiter = limiter();
    let ip = peer()
        .trust_proxies(ProxyHeader::XRealIp, ["127.0.0.1".parse().unwrap()])
        .ipv4_prefix(24)
        .unwrap()
        .ipv6_prefix(48)
        .unwrap();
    let url = app_url(&limiter, ip).await;
    charged(
        &limiter,
        &url,
        "x-real-ip",
        "198.51.100.200",
        &[198, 51, 100, 0],
    )
    .await;
    let net: Ipv6Addr = "2001:db8:cafe::".parse().unwrap();
    charged(
        &limiter,
        &url,
        "x-real-ip",
        "2001:db8:cafe:77::1",
        &net.octets(),
    )
    .await;

    let err = peer().ipv6_prefix(129).unwrap_err();
    assert!(err.to_string().contains("use 0 to 128"), "{err}");
    let err = peer().ipv4_prefix(33).unwrap_err();
    assert!(err.to_string().contains("use 0 to 32"), "{err}");
    let err = "10.0.0.0/x"
        .parse::<shuffle_limiter::tower::Cidr>()
        .unwrap_err();
    assert!(
        err.to_string().contains("for example \"10.0.0.0/8\""),
        "{err}"
    );
    let _: IpAddr = "::1".parse().unwrap();
}

/// A proxy at 127.0.0.1 that writes `written` for the client 198.51.100.7;
/// the client adds each of `forged` with an address of its own choosing.
/// Only the proxy's header counts: the client pays for every request, and
/// its 4 tokens are all it gets.
async fn forged_headers_are_ignored(ip: ClientIp, written: &str, forged: &[&str]) {
    let limiter = limiter();
    let url = app_url(&limiter, ip).await;
    let client = client();
    let mut granted = 0;
    let value = |name: &str, addr: String| match name {
        "forwarded" => format!("for={addr}"),
        _ => addr,
    };
    for i in 0..40 {
        let proxy = value(written, "198.51.100.7".to_owned());
        let mut request = client.get(&url).header(written, proxy);
        for &name in forged {
            request = request.header(name, value(name, format!("203.0.113.{i}")));
        }
        if request.send().await.unwrap().status() == StatusCode::OK {
            granted += 1;
        }
    }
    assert_eq!(
        granted, 4,
        "{written} written by the proxy, {forged:?} forged"
    );
    assert_eq!(limiter.remaining(&[198, 51, 100, 7]), 0);
}

#[tokio::test]
async fn a_client_behind_a_trusted_proxy_cannot_choose_its_key_with_another_header() {
    let proxy = || ["127.0.0.1/32".parse().unwrap()];
    let xff = peer().trust_proxies(ProxyHeader::XForwardedFor, proxy());
    forged_headers_are_ignored(xff, "x-forwarded-for", &["forwarded", "x-real-ip"]).await;
    let real_ip = peer().trust_proxies(ProxyHeader::XRealIp, proxy());
    forged_headers_are_ignored(real_ip, "x-real-ip", &["x-forwarded-for", "forwarded"]).await;
    let forwarded = peer().trust_proxies(ProxyHeader::Forwarded, proxy());
    forged_headers_are_ignored(forwarded, "forwarded", &["x-forwarded-for", "x-real-ip"]).await;
}

#[tokio::test]
async fn a_clients_byte_that_is_not_text_does_not_hide_the_hop_its_proxy_wrote() {
    // A proxy appends the client's address to the client's own value
    // (nginx's `$proxy_add_x_forwarded_for`): one byte of the client's that
    // is not text spoils the client's hop alone, and the client still pays
    // as the address the proxy reported, not as the proxy.
    let limiter = limiter();
    for (header, name, sent) in [
        (
            ProxyHeader::XForwardedFor,
            "x-forwarded-for",
            &b"\xff, 198.51.100.7"[..],
        ),
        (
            ProxyHeader::Forwarded,
            "forwarded",
            &b"for=\"\xe9\", for=198.51.100.7"[..],
        ),
    ] {
        let url = app_url(&limiter, behind_proxies(header)).await;
        let value = axum::http::HeaderValue::from_bytes(sent).unwrap();
        let client_key = [198, 51, 100, 7];
        let (before, proxy) = (
            limiter.remaining(&client_key),
            limiter.remaining(&LOCALHOST),
        );
        let reply = client().get(&url).header(name, value).send().await.unwrap();
        assert_eq!(reply.status(), StatusCode::OK, "{name}");
        assert_eq!(limiter.remaining(&client_key), before - 1, "{name}");
        assert_eq!(
            limiter.remaining(&LOCALHOST),
            proxy,
            "{name}: the proxy paid"
        );
    }
}
