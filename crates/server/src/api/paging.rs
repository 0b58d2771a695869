//! Cursor paging and date filters of the list endpoints (`/v1/invoices`, `/v1/certificates`,
//! `/v1/tenants`, `/v1/prices`), in one place.
//!
//! A list answers a page of at most `limit` items ([`DEFAULT_LIMIT`] unless asked, at most
//! [`MAX_LIMIT`]) in its stable order (an index or id that only grows for new items). The
//! body stays a bare JSON array, as before paging, so existing clients read it unchanged; when
//! more items follow, the answer says how to get them in two headers:
//! `Link: <…&cursor=…>; rel="next"` (RFC 8288) and `X-Next-Cursor`. The last page has neither.
//!
//! A cursor is opaque to clients: base64url (no padding) of `gl1|<list>|<scope>|<key>`, the
//! sort key of the page's last item, bound to its list and to the tenant scope of the walk
//! (`*` for all tenants). A page after a cursor starts strictly after its key, so items
//! inserted during a walk are never repeated and, where new items sort last (log indices), never
//! missed. A cursor does not widen what a caller sees: every page is read with the caller's
//! own tenant scope, and a cursor of another list or scope is refused (400 `invalid_parameter`
//! naming `cursor`), like a malformed one.

use super::error::ApiError;
use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use gpuledger_core::time::Timestamp;

/// Items per page when the request names no `limit`.
pub const DEFAULT_LIMIT: usize = 100;

/// Largest `limit` a request may ask for; more is a 400 naming `limit`.
pub const MAX_LIMIT: usize = 1000;

/// Longest `cursor` accepted, in characters (ours are far shorter: a list name, a tenant id and
/// a key).
pub const MAX_CURSOR_CHARS: usize = 512;

/// Header with the cursor of the next page, when there is one.
pub const NEXT_CURSOR_HEADER: &str = "X-Next-Cursor";

/// The version tag that starts every cursor.
const CURSOR_TAG: &str = "gl1";

/// What one list request asks for: at most `limit` items after `after` (a sort key), in the
/// walk of `list` for `scope`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paging {
    list: &'static str,
    scope: String,
    pub limit: usize,
    /// The sort key of the previous page's last item, from the cursor.
    pub after: Option<String>,
}

impl Paging {
    /// Reads `limit` and `cursor` for the list `list` walked with tenant scope `scope` (`None`:
    /// all tenants).
    pub fn parse(
        list: &'static str,
        scope: Option<&str>,
        limit: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<Paging, ApiError> {
        let limit = parse_limit(limit)?;
        let scope = scope.unwrap_or("*").to_owned();
        let after = cursor.map(|c| decode_cursor(list, &scope, c)).transpose()?;
        Ok(Paging {
            list,
            scope,
            limit,
            after,
        })
    }

    /// The cursor's key as a log index, for the lists ordered by one.
    pub fn after_index(&self) -> Result<Option<u64>, ApiError> {
        self.after
            .as_deref()
            .map(|k| {
                k.parse::<u64>()
                    .ok()
                    .filter(|i| *i <= gpuledger_core::limits::MAX_SEQ)
                    .ok_or_else(malformed_cursor)
            })
            .transpose()
    }

    /// How many items to read: one more than the page, to learn whether another follows.
    pub fn fetch(&self) -> usize {
        self.limit + 1
    }

    /// The cursor that continues the walk after the item whose sort key is `key`.
    pub fn cursor_after(&self, key: &str) -> String {
        URL_SAFE_NO_PAD.encode(format!("{CURSOR_TAG}|{}|{}|{key}", self.list, self.scope))
    }

    /// Answers `rows` (read with [`Paging::fetch`]) as a page: at most `limit` of them as a
    /// JSON array and, if more were read, the `Link` and `X-Next-Cursor` of the next page.
    pub fn respond<T: serde::Serialize>(
        &self,
        req: &HttpRequest,
        mut rows: Vec<T>,
        key: impl Fn(&T) -> String,
    ) -> HttpResponse {
        let mut res = HttpResponse::Ok();
        if rows.len() > self.limit {
            rows.truncate(self.limit);
            if let Some(last) = rows.last() {
                self.next_headers(&mut res, req, &self.cursor_after(&key(last)));
            }
        }
        res.json(rows)
    }

    fn next_headers(&self, res: &mut HttpResponseBuilder, req: &HttpRequest, cursor: &str) {
        res.insert_header((
            "Link",
            format!(
                "<{}>; rel=\"next\"",
                next_link(req.path(), req.query_string(), cursor)
            ),
        ));
        res.insert_header((NEXT_CURSOR_HEADER, cursor.to_owned()));
    }
}

/// The relative URL of the next page: the request's path and query with `cursor` replaced.
pub fn next_link(path: &str, query: &str, cursor: &str) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if k != "cursor" {
            out.append_pair(&k, &v);
        }
    }
    out.append_pair("cursor", cursor);
    format!("{path}?{}", out.finish())
}

/// Reads `limit`: an integer from 1 to [`MAX_LIMIT`], [`DEFAULT_LIMIT`] when absent.
pub fn parse_limit(s: Option<&str>) -> Result<usize, ApiError> {
    let Some(s) = s else {
        return Ok(DEFAULT_LIMIT);
    };
    s.parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or_else(|| {
            ApiError::invalid_parameter(
                "limit",
                format!("{s:?} is not an integer from 1 to {MAX_LIMIT}"),
            )
        })
}

fn malformed_cursor() -> ApiError {
    ApiError::invalid_parameter(
        "cursor",
        "is not a cursor this server gave (take X-Next-Cursor or the Link header as is)",
    )
}

/// The key of a cursor of `list` and `scope`; anything else is a 400 naming `cursor`.
fn decode_cursor(list: &str, scope: &str, s: &str) -> Result<String, ApiError> {
    if s.is_empty() || s.len() > MAX_CURSOR_CHARS {
        return Err(malformed_cursor());
    }
    let bytes = URL_SAFE_NO_PAD.decode(s).map_err(|_| malformed_cursor())?;
    let text = String::from_utf8(bytes).map_err(|_| malformed_cursor())?;
    let mut parts = text.splitn(4, '|');
    let (Some(CURSOR_TAG), Some(l), Some(sc), Some(key)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed_cursor());
    };
    if key.is_empty() {
        return Err(malformed_cursor());
    }
    if l != list || sc != scope {
        return Err(ApiError::invalid_parameter(
            "cursor",
            "belongs to another list or tenant scope: start this walk without a cursor",
        ));
    }
    Ok(key.to_owned())
}

/// Reads an optional timestamp parameter `name`.
pub fn timestamp(name: &str, s: Option<&str>) -> Result<Option<Timestamp>, ApiError> {
    s.map(|s| Timestamp::parse(s).map_err(|e| ApiError::invalid_parameter(name, e.to_string())))
        .transpose()
}

/// Reads the date filter `[from, to)` of a list: either bound may be left out; given both, `to`
/// must be after `from`.
/// The query of a list of issued documents (invoices, certificates): a tenant, a date filter
/// and paging.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PeriodListQuery {
    /// Tenant id (tenant tokens: their own, and may omit it).
    pub tenant: Option<String>,
    /// Only documents whose period ends after this instant (`YYYY-MM-DDTHH:MM:SSZ`).
    pub from: Option<String>,
    /// Only documents whose period starts before this instant: with `from`, those whose period
    /// overlaps `[from, to)`.
    pub to: Option<String>,
    /// Page size, from 1 to 1000 (`paging::MAX_LIMIT`); 100 if left out.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
    /// Where to continue: the previous page's `X-Next-Cursor`, as is.
    pub cursor: Option<String>,
}

/// A [`PeriodListQuery`] read for `caller`: the tenant it may see, the date filter, the page.
pub struct PeriodList {
    pub tenant: Option<String>,
    pub period: (Option<Timestamp>, Option<Timestamp>),
    pub page: Paging,
}

impl PeriodListQuery {
    /// Checks the query of list `list` ("invoices", "certificates") for `caller`.
    pub fn read(
        self,
        caller: &super::auth::Caller,
        list: &'static str,
    ) -> Result<PeriodList, ApiError> {
        let tenant = caller.tenant_scope(self.tenant)?;
        let period = date_range(self.from.as_deref(), self.to.as_deref())?;
        let page = Paging::parse(
            list,
            tenant.as_deref(),
            self.limit.as_deref(),
            self.cursor.as_deref(),
        )?;
        Ok(PeriodList {
            tenant,
            period,
            page,
        })
    }
}

/// A page of a document list: the store's `list_page` for (tenant, period, after, fetch).
pub type ListPage<T> = fn(
    &mut gpuledger_store::DbConn,
    Option<&str>,
    (Option<Timestamp>, Option<Timestamp>),
    Option<u64>,
    usize,
) -> Result<Vec<T>, gpuledger_store::StoreError>;

impl PeriodListQuery {
    /// Answers list `list` for `caller`: the page `list_page` reads, continued after the
    /// entry index `index` gives of its last document.
    pub async fn answer<T: serde::Serialize + Send + 'static>(
        self,
        state: &super::AppState,
        caller: &super::auth::Caller,
        req: &HttpRequest,
        list: &'static str,
        (list_page, index): (ListPage<T>, fn(&T) -> u64),
    ) -> Result<HttpResponse, ApiError> {
        let PeriodList {
            tenant,
            period,
            page,
        } = self.read(caller, list)?;
        let (after, fetch) = (page.after_index()?, page.fetch());
        let rows = state
            .read(move |c| list_page(c, tenant.as_deref(), period, after, fetch))
            .await?;
        Ok(page.respond(req, rows, |d| index(d).to_string()))
    }
}

pub fn date_range(
    from: Option<&str>,
    to: Option<&str>,
) -> Result<(Option<Timestamp>, Option<Timestamp>), ApiError> {
    let from = timestamp("from", from)?;
    let to = timestamp("to", to)?;
    if let (Some(f), Some(t)) = (from, to) {
        if t <= f {
            return Err(ApiError::invalid_parameter("to", "must be after from"));
        }
    }
    Ok((from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(e: &ApiError) -> String {
        match e {
            ApiError::BadRequest {
                slug: "invalid_parameter",
                errors: Some(items),
                ..
            } => items[0].field.clone(),
            other => panic!("not an invalid_parameter: {other:?}"),
        }
    }

    #[test]
    fn limit_defaults_and_edges() {
        assert_eq!(parse_limit(None).unwrap(), DEFAULT_LIMIT);
        assert_eq!(parse_limit(Some("1")).unwrap(), 1);
        assert_eq!(
            parse_limit(Some(&MAX_LIMIT.to_string())).unwrap(),
            MAX_LIMIT
        );
        for bad in [
            "0",
            "-1",
            "",
            " 5",
            "1.5",
            "abc",
            &(MAX_LIMIT + 1).to_string(),
            "99999999999999999999999",
        ] {
            assert_eq!(
                field(&parse_limit(Some(bad)).unwrap_err()),
                "limit",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn cursor_round_trips_within_its_list_and_scope() {
        let p = Paging::parse("invoices", Some("acme"), None, None).unwrap();
        assert_eq!(p.after, None);
        let c = p.cursor_after("42");
        assert!(c
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        let next = Paging::parse("invoices", Some("acme"), Some("10"), Some(&c)).unwrap();
        assert_eq!(next.after_index().unwrap(), Some(42));
        assert_eq!(next.limit, 10);
        // Ids with any characters but `|` are keys too.
        let t = Paging::parse("tenants", None, None, None).unwrap();
        let c = t.cursor_after("zeta-9");
        let next = Paging::parse("tenants", None, None, Some(&c)).unwrap();
        assert_eq!(next.after.as_deref(), Some("zeta-9"));
    }

    #[test]
    fn foreign_and_malformed_cursors_are_refused() {
        let acme = Paging::parse("invoices", Some("acme"), None, None)
            .unwrap()
            .cursor_after("7");
        for (list, scope) in [
            ("invoices", Some("globex")),
            ("invoices", None),
            ("certificates", Some("acme")),
        ] {
            let e = Paging::parse(list, scope, None, Some(&acme)).unwrap_err();
            assert_eq!(field(&e), "cursor");
        }
        let forged = |s: &str| URL_SAFE_NO_PAD.encode(s);
        for bad in [
            "".to_owned(),
            "!!!".to_owned(),
            "a".repeat(MAX_CURSOR_CHARS + 1),
            forged("gl0|invoices|acme|7"),
            forged("gl1|invoices|acme"),
            forged("gl1|invoices|acme|"),
            URL_SAFE_NO_PAD.encode([0xff, 0xfe]),
        ] {
            let e = Paging::parse("invoices", Some("acme"), None, Some(&bad)).unwrap_err();
            assert_eq!(field(&e), "cursor", "{bad:?}");
        }
        // Well formed, but not an index.
        let p = Paging::parse(
            "invoices",
            Some("acme"),
            None,
            Some(&forged("gl1|invoices|acme|x")),
        )
        .unwrap();
        assert_eq!(field(&p.after_index().unwrap_err()), "cursor");
    }

    #[test]
    fn next_link_replaces_only_the_cursor() {
        assert_eq!(
            next_link("/v1/invoices", "", "abc"),
            "/v1/invoices?cursor=abc"
        );
        assert_eq!(
            next_link(
                "/v1/invoices",
                "limit=2&cursor=old&from=2026-01-01T00%3A00%3A00Z",
                "new"
            ),
            "/v1/invoices?limit=2&from=2026-01-01T00%3A00%3A00Z&cursor=new"
        );
    }

    #[test]
    fn date_range_bounds() {
        assert_eq!(date_range(None, None).unwrap(), (None, None));
        let (f, t) = date_range(Some("2026-01-01T00:00:00Z"), None).unwrap();
        assert!(f.is_some() && t.is_none());
        let e = date_range(Some("2026-01-02T00:00:00Z"), Some("2026-01-01T00:00:00Z")).unwrap_err();
        assert_eq!(field(&e), "to");
        let e = date_range(Some("2026-01-01"), None).unwrap_err();
        assert_eq!(field(&e), "from");
    }

    #[test]
    fn respond_pages_and_says_what_follows() {
        let req = actix_web::test::TestRequest::get()
            .uri("/v1/tenants?limit=2")
            .to_http_request();
        let p = Paging::parse("tenants", None, Some("2"), None).unwrap();
        let res = p.respond(&req, vec!["a", "b", "c"], |s| s.to_string());
        let next = res
            .headers()
            .get(NEXT_CURSOR_HEADER)
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(next, p.cursor_after("b"));
        let link = res.headers().get("Link").unwrap().to_str().unwrap();
        assert_eq!(
            link,
            format!("</v1/tenants?limit=2&cursor={next}>; rel=\"next\"")
        );
        let last = p.respond(&req, vec!["a", "b"], |s| s.to_string());
        assert!(last.headers().get("Link").is_none());
        assert!(last.headers().get(NEXT_CURSOR_HEADER).is_none());
    }
}
