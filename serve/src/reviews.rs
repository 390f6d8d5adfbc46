//! The creates the API server answers rather than stores: a TokenRequest (`POST .../serviceaccounts/NAME/token`,
//! what `kubectl create token` sends), a TokenReview (who a token is), a SelfSubjectReview (who am I: `kubectl auth
//! whoami`), a SubjectAccessReview (may this user do that), a SelfSubjectAccessReview (may I: `kubectl auth can-i`)
//! and a SelfSubjectRulesReview (what may I: `kubectl auth can-i --list`). Each is answered 201 with the request
//! and its `status`, as the API server answers them; a malformed one is refused with the API server's words.
//!
//! They are answered here, from the snapshot and the tokens, never by the world: nothing is stored, no revision
//! taken. The caller has already been authorised for the create ([`crate::http`]).

use serde_json::{Value, json};

use gpuclaim_engine::model::Time;
use gpuclaim_sim::apiserver::objects::timestamp;
use gpuclaim_sim::served::protobuf;
use gpuclaim_sim::served::rbac::{Attributes, Authorizer};
use gpuclaim_sim::served::resources::{self, Resource};
use gpuclaim_sim::served::status::{self, Cause};
use gpuclaim_sim::served::store::Snapshot;
use gpuclaim_sim::users::User;

use crate::auth::{Holder, Tokens};
use crate::route::Target;

/// The audiences a token is for when a request names none: the API server's default `--api-audiences` (its
/// service-account issuer).
pub const API_AUDIENCES: [&str; 1] = ["https://kubernetes.default.svc.cluster.local"];
/// A TokenRequest's lifetime when it asks for none (`spec.expirationSeconds` defaults to an hour).
pub const TOKEN_SECONDS_DEFAULT: i64 = 3600;
/// The shortest lifetime a TokenRequest may ask for (ten minutes).
pub const TOKEN_SECONDS_MIN: i64 = 600;
/// The longest lifetime a TokenRequest may ask for (2^32 seconds).
pub const TOKEN_SECONDS_MAX: i64 = 1 << 32;

/// Which answered create a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Review {
    TokenRequest,
    TokenReview,
    SelfSubjectReview,
    SubjectAccessReview,
    SelfSubjectAccessReview,
    SelfSubjectRulesReview,
}

impl Review {
    /// The review a create of `target` is, if it is one.
    pub fn of(target: &Target<'_>) -> Option<Review> {
        let resource = target.resource;
        match (resource.group, resource.plural, target.subresource) {
            ("", "serviceaccounts", Some("token")) => Some(Review::TokenRequest),
            ("authentication.k8s.io", "tokenreviews", None) => Some(Review::TokenReview),
            ("authentication.k8s.io", "selfsubjectreviews", None) => Some(Review::SelfSubjectReview),
            ("authorization.k8s.io", "selfsubjectrulesreviews", None) => Some(Review::SelfSubjectRulesReview),
            ("authorization.k8s.io", "subjectaccessreviews", None) => Some(Review::SubjectAccessReview),
            ("authorization.k8s.io", "selfsubjectaccessreviews", None) => Some(Review::SelfSubjectAccessReview),
            _ => None,
        }
    }
}

/// What a review needs of the server: the snapshot, the tokens, the authorizer and the twin's clock.
pub struct Context<'a> {
    pub snapshot: &'a Snapshot,
    pub tokens: &'a Tokens,
    pub authorizer: &'a Authorizer,
    pub now: Time,
}

/// The answer to `review` from `user` on `target` with `body`: the code and the body (the review with its status,
/// or a `Status`).
pub fn answer(
    review: Review,
    context: &Context<'_>,
    target: &Target<'_>,
    user: &User,
    content_type: &str,
    body: &[u8],
) -> (u16, Value) {
    let request = match read_body(target, content_type, body) {
        Ok(request) => request,
        Err(refused) => return (code_of(&refused), refused),
    };
    let answered = match review {
        Review::TokenRequest => token_request(context, target, request),
        Review::TokenReview => token_review(context, request),
        Review::SelfSubjectReview => Ok(self_subject_review(context, target.resource, user, request)),
        Review::SelfSubjectRulesReview => self_subject_rules_review(context, target.resource, user, request),
        Review::SubjectAccessReview => subject_access_review(context, target.resource, request),
        Review::SelfSubjectAccessReview => self_subject_access_review(context, target.resource, user, request),
    };
    match answered {
        Ok(body) => (201, body),
        Err(refused) => (code_of(&refused), refused),
    }
}

fn code_of(status: &Value) -> u16 {
    status.get("code").and_then(Value::as_u64).and_then(|code| u16::try_from(code).ok()).unwrap_or(500)
}

/// The request's object, from JSON or (as kubectl sends reviews) protobuf; an empty body reads as an empty object.
fn read_body(target: &Target<'_>, content_type: &str, body: &[u8]) -> Result<Value, Value> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let kind = match target.subresource {
        Some(_) => "TokenRequest",
        None => target.resource.kind,
    };
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if media.eq_ignore_ascii_case(protobuf::CONTENT_TYPE) {
        return protobuf::decode(body, kind).map_err(|error| status::bad_request(&error.to_string()));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(object @ Value::Object(_)) => Ok(object),
        Ok(_) => Err(status::bad_request(&format!("the request body is not a {kind} object"))),
        Err(error) => Err(status::bad_request(&format!("the request body is not a {kind}: {error}"))),
    }
}

/// A string field of `object` at `pointer` (`""` when absent).
fn text<'v>(object: &'v Value, pointer: &str) -> &'v str {
    object.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// The strings of a list field (none when absent).
fn strings(object: &Value, pointer: &str) -> Vec<String> {
    let items = object.pointer(pointer).and_then(Value::as_array);
    items.into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// `object` as the review answered: its kind and apiVersion, and `status`.
fn answered(mut object: Value, resource: &Resource, kind: &str, status: Value) -> Value {
    object["kind"] = kind.into();
    object["apiVersion"] = resource_api_version(resource, kind).into();
    if object.get("metadata").is_none_or(|metadata| !metadata.is_object()) {
        object["metadata"] = json!({});
    }
    object["status"] = status;
    object
}

fn resource_api_version(resource: &Resource, kind: &str) -> String {
    match kind {
        "TokenRequest" => "authentication.k8s.io/v1".to_owned(),
        _ => resource.api_version(),
    }
}

/// A TokenRequest: a new token for the ServiceAccount named, if it is stored (404 otherwise), for
/// `spec.expirationSeconds` (an hour by default; at least ten minutes).
fn token_request(context: &Context<'_>, target: &Target<'_>, mut request: Value) -> Result<Value, Value> {
    let namespace = target.namespace.unwrap_or_default();
    let name = target.name.unwrap_or_default();
    let accounts = target.resource;
    if context.snapshot.get(accounts.id(), namespace, name).is_none() {
        return Err(status::not_found(accounts, name));
    }
    let seconds = match request.pointer("/spec/expirationSeconds") {
        None | Some(Value::Null) => TOKEN_SECONDS_DEFAULT,
        Some(value) => value
            .as_i64()
            .ok_or_else(|| status::bad_request(&format!("spec.expirationSeconds must be an integer, not {value}")))?,
    };
    let refusal = match seconds {
        seconds if seconds < TOKEN_SECONDS_MIN => Some("may not specify a duration less than 10 minutes"),
        seconds if seconds > TOKEN_SECONDS_MAX => Some("may not specify a duration larger than 2^32 seconds"),
        _ => None,
    };
    if let Some(why) = refusal {
        let cause =
            Cause::new("FieldValueInvalid", &format!("Invalid value: {seconds}: {why}"), "spec.expirationSeconds");
        return Err(token_request_invalid(name, cause));
    }
    let token = context.tokens.mint(namespace, name).map_err(status::internal_error)?;
    let expires_ms = context.now.as_millisecond().saturating_add(seconds.saturating_mul(1000));
    let expires = Time::from_millisecond(expires_ms).unwrap_or(context.now);
    let mut audiences = strings(&request, "/spec/audiences");
    if audiences.is_empty() {
        audiences = API_AUDIENCES.map(str::to_owned).to_vec();
    }
    if !request.get("spec").is_some_and(Value::is_object) {
        request["spec"] = json!({});
    }
    request["spec"]["audiences"] = json!(audiences);
    request["spec"]["expirationSeconds"] = seconds.into();
    if request["spec"].get("boundObjectRef").is_none() {
        request["spec"]["boundObjectRef"] = Value::Null;
    }
    let mut object = answered(request, accounts, "TokenRequest", json!({}));
    object["metadata"]["name"] = name.into();
    object["metadata"]["namespace"] = namespace.into();
    object["status"] = json!({"token": token, "expirationTimestamp": timestamp(expires)});
    Ok(object)
}

/// 422 for a TokenRequest: `TokenRequest.authentication.k8s.io "sa" is invalid: ...`.
fn token_request_invalid(name: &str, cause: Cause) -> Value {
    let message = format!("TokenRequest.authentication.k8s.io {name:?} is invalid: {}: {}", cause.field, cause.message);
    let details = status::Details {
        name: name.to_owned(),
        group: "authentication.k8s.io".to_owned(),
        kind: "TokenRequest".to_owned(),
        causes: vec![cause],
        ..status::Details::default()
    };
    status::status(422, "Invalid", &message, Some(details))
}

/// A TokenReview: who `spec.token` is. A token the twin did not issue (or whose ServiceAccount is gone) is not
/// authenticated, with no error (as the API server answers a token none of its authenticators recognises).
fn token_review(context: &Context<'_>, request: Value) -> Result<Value, Value> {
    let token = text(&request, "/spec/token").to_owned();
    if token.is_empty() {
        return Err(status::bad_request("token is required for TokenReview in authentication"));
    }
    let resource = resources::find("authentication.k8s.io", "v1", "tokenreviews").expect("served");
    let status = match context.tokens.holder(&token, context.snapshot) {
        None => json!({"user": {}}),
        Some(holder) => {
            let mut audiences = strings(&request, "/spec/audiences");
            if audiences.is_empty() {
                audiences = API_AUDIENCES.map(str::to_owned).to_vec();
            }
            json!({"authenticated": true, "user": user_info(context, &holder), "audiences": audiences})
        }
    };
    Ok(answered(request, resource, "TokenReview", status))
}

/// A holder as a review's `UserInfo`: username, groups, and a service account's uid (its ServiceAccount's).
fn user_info(context: &Context<'_>, holder: &Holder) -> Value {
    let user = holder.user();
    let mut info = json!({"username": user.username, "groups": user.groups});
    if let Holder::ServiceAccount { namespace, name } = holder {
        let accounts = resources::find("", "v1", "serviceaccounts").expect("served").id();
        let stored = context.snapshot.get(accounts, namespace, name);
        let uid = stored.map(|stored| text(&stored.object, "/metadata/uid").to_owned()).unwrap_or_default();
        if !uid.is_empty() {
            info["uid"] = uid.into();
        }
    }
    info
}

/// The holder a user is: a service account by its username, else the user itself.
fn holder_of(user: &User) -> Holder {
    let account = user.username.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':'));
    match account {
        Some((namespace, name)) => Holder::ServiceAccount { namespace: namespace.to_owned(), name: name.to_owned() },
        None => Holder::User(user.clone()),
    }
}

/// A SelfSubjectReview: who the caller is (`kubectl auth whoami`).
fn self_subject_review(context: &Context<'_>, resource: &Resource, user: &User, request: Value) -> Value {
    let info = match holder_of(user) {
        Holder::User(_) => json!({"username": user.username, "groups": user.groups}),
        account => user_info(context, &account),
    };
    answered(request, resource, resource.kind, json!({"userInfo": info}))
}

/// A SelfSubjectRulesReview: the rules the caller holds in `spec.namespace` (`kubectl auth can-i --list`), split into
/// resource and non-resource rules; the errors met resolving them as `evaluationError`.
fn self_subject_rules_review(
    context: &Context<'_>,
    resource: &Resource,
    user: &User,
    request: Value,
) -> Result<Value, Value> {
    let namespace = text(&request, "/spec/namespace").to_owned();
    if namespace.is_empty() {
        return Err(status::bad_request("no namespace on request"));
    }
    let (rules, errors) = context.authorizer.rules_for(context.snapshot, user, &namespace);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in rules {
        if !rule.resources.is_empty() {
            let mut listed = json!({"verbs": rule.verbs, "resources": rule.resources});
            if !rule.api_groups.is_empty() {
                listed["apiGroups"] = json!(rule.api_groups);
            }
            if !rule.resource_names.is_empty() {
                listed["resourceNames"] = json!(rule.resource_names);
            }
            resource_rules.push(listed);
        }
        if !rule.non_resource_urls.is_empty() {
            non_resource_rules.push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
        }
    }
    let mut status =
        json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": false});
    if !errors.is_empty() {
        status["evaluationError"] = errors.into();
    }
    Ok(answered(request, resource, resource.kind, status))
}

/// The request attributes of a review's spec (`resourceAttributes` or `nonResourceAttributes`), or the causes of
/// its refusal (authorization validation's words).
fn review_attributes(spec: &Value) -> Result<Attributes, Vec<Cause>> {
    let resource = spec.get("resourceAttributes").filter(|value| !value.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|value| !value.is_null());
    match (resource, non_resource) {
        (Some(asked), None) => Ok(Attributes::resource(
            text(asked, "/verb"),
            text(asked, "/group"),
            text(asked, "/resource"),
            text(asked, "/subresource"),
            text(asked, "/namespace"),
            text(asked, "/name"),
        )),
        (None, Some(asked)) => Ok(Attributes::non_resource(text(asked, "/verb"), text(asked, "/path"))),
        (Some(_), Some(asked)) => Err(vec![Cause::new(
            "FieldValueInvalid",
            &format!("Invalid value: {}: cannot be specified in combination with resourceAttributes", go_value(asked)),
            "spec.nonResourceAttributes",
        )]),
        (None, None) => Err(vec![Cause::new(
            "FieldValueInvalid",
            "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
            "spec.resourceAttributes",
        )]),
    }
}

/// A value as a field error quotes it (compact JSON, quoted as Go's `%q` of its text).
fn go_value(value: &Value) -> String {
    format!("{:?}", value.to_string())
}

/// The review's status for a decision: `allowed`, and the authorizer's reason when it gives one.
fn decision_status(context: &Context<'_>, user: &User, attributes: &Attributes) -> Value {
    let decision = context.authorizer.authorize(context.snapshot, user, attributes);
    let mut status = json!({"allowed": decision.allowed()});
    if !decision.reason().is_empty() {
        status["reason"] = decision.reason().into();
    }
    status
}

/// A SubjectAccessReview: may `spec.user` (with `spec.groups`) do what the spec asks.
fn subject_access_review(context: &Context<'_>, resource: &Resource, request: Value) -> Result<Value, Value> {
    let spec = request.get("spec").cloned().unwrap_or(Value::Null);
    let user = User { username: text(&spec, "/user").to_owned(), groups: strings(&spec, "/groups") };
    let mut causes = match review_attributes(&spec) {
        Ok(_) => Vec::new(),
        Err(causes) => causes,
    };
    if user.username.is_empty() && user.groups.is_empty() {
        let why = "Invalid value: \"\": at least one of user or group must be specified";
        causes.push(Cause::new("FieldValueInvalid", why, "spec.user"));
    }
    if !causes.is_empty() {
        return Err(status::invalid(resource, "", causes));
    }
    let attributes = review_attributes(&spec).expect("checked above");
    let status = decision_status(context, &user, &attributes);
    Ok(answered(request, resource, resource.kind, status))
}

/// A SelfSubjectAccessReview: may the caller do what the spec asks.
fn self_subject_access_review(
    context: &Context<'_>,
    resource: &Resource,
    user: &User,
    request: Value,
) -> Result<Value, Value> {
    let spec = request.get("spec").cloned().unwrap_or(Value::Null);
    let attributes = review_attributes(&spec).map_err(|causes| status::invalid(resource, "", causes))?;
    let status = decision_status(context, user, &attributes);
    Ok(answered(request, resource, resource.kind, status))
}

#[cfg(test)]
mod tests {
    use gpuclaim_sim::served::store::ResourceId;

    use super::*;
    use crate::route::{self, Endpoint};

    fn target(path: &str) -> Target<'_> {
        match route::endpoint(path).unwrap() {
            Endpoint::Resource(target) => target,
            other => panic!("{path}: {other:?}"),
        }
    }

    /// A snapshot holding the ServiceAccount `team/reader`.
    fn snapshot() -> Snapshot {
        let mut snapshot = Snapshot::new(1, 10);
        let accounts = ResourceId { group: "", plural: "serviceaccounts" };
        let account = json!({"metadata": {"name": "reader", "namespace": "team", "uid": "u-1"}});
        snapshot.upsert(accounts, "team", "reader", 2, account);
        snapshot
    }

    fn ask(review: Review, path: &str, user: &User, body: Value) -> (u16, Value) {
        let snapshot = snapshot();
        let tokens = Tokens::new("admin");
        let authorizer = Authorizer::new();
        let now = Time::from_second(1_800_000_000).unwrap();
        let context = Context { snapshot: &snapshot, tokens: &tokens, authorizer: &authorizer, now };
        answer(review, &context, &target(path), user, "application/json", body.to_string().as_bytes())
    }

    const TOKEN: &str = "/api/v1/namespaces/team/serviceaccounts/reader/token";

    #[test]
    fn a_token_request_answers_a_token_expiring_on_the_twins_clock() {
        let admin = gpuclaim_sim::users::platform_admin();
        let (code, answer) = ask(Review::TokenRequest, TOKEN, &admin, json!({"spec": {"expirationSeconds": 7200}}));
        assert_eq!(code, 201, "{answer}");
        assert_eq!(
            (answer["kind"].as_str(), answer["apiVersion"].as_str()),
            (Some("TokenRequest"), Some("authentication.k8s.io/v1"))
        );
        assert_eq!(answer["metadata"], json!({"name": "reader", "namespace": "team"}));
        assert_eq!(answer["spec"]["audiences"], json!(API_AUDIENCES));
        assert_eq!(answer["status"]["expirationTimestamp"], "2027-01-15T10:00:00Z");
        assert_eq!(answer["status"]["token"].as_str().map(str::len), Some(64));
        let (_, default) = ask(Review::TokenRequest, TOKEN, &admin, json!({}));
        assert_eq!(default["spec"]["expirationSeconds"], 3600);
    }

    #[test]
    fn a_token_request_for_a_missing_account_or_too_short_is_refused() {
        let admin = gpuclaim_sim::users::platform_admin();
        let ghost = "/api/v1/namespaces/team/serviceaccounts/ghost/token";
        let (code, refused) = ask(Review::TokenRequest, ghost, &admin, json!({}));
        assert_eq!((code, refused["message"].as_str()), (404, Some("serviceaccounts \"ghost\" not found")));
        let (code, refused) = ask(Review::TokenRequest, TOKEN, &admin, json!({"spec": {"expirationSeconds": 60}}));
        assert_eq!(code, 422);
        assert_eq!(
            refused["message"],
            "TokenRequest.authentication.k8s.io \"reader\" is invalid: spec.expirationSeconds: Invalid value: 60: may \
             not specify a duration less than 10 minutes"
        );
    }

    #[test]
    fn a_token_review_knows_the_tokens_the_twin_issued() {
        let admin = gpuclaim_sim::users::platform_admin();
        let path = "/apis/authentication.k8s.io/v1/tokenreviews";
        let (code, answer) = ask(Review::TokenReview, path, &admin, json!({"spec": {"token": "admin"}}));
        assert_eq!(code, 201);
        assert_eq!(
            answer["status"],
            json!({"authenticated": true, "audiences": API_AUDIENCES,
                "user": {"username": "platform-admin", "groups": ["system:masters", "system:authenticated"]}})
        );
        let (_, unknown) = ask(Review::TokenReview, path, &admin, json!({"spec": {"token": "other"}}));
        assert_eq!(unknown["status"], json!({"user": {}}));
        let (code, refused) = ask(Review::TokenReview, path, &admin, json!({"spec": {}}));
        assert_eq!(
            (code, refused["message"].as_str()),
            (400, Some("token is required for TokenReview in authentication"))
        );
    }

    #[test]
    fn a_subject_access_review_decides_for_the_user_it_names_and_checks_its_spec() {
        let admin = gpuclaim_sim::users::platform_admin();
        let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
        let spec = json!({"user": "alice", "nonResourceAttributes": {"path": "/version", "verb": "get"}});
        let (code, answer) = ask(Review::SubjectAccessReview, path, &admin, json!({"spec": spec}));
        assert_eq!((code, answer["status"]["allowed"].as_bool()), (201, Some(false)), "alice is not authenticated");
        let spec = json!({"user": "alice", "groups": ["system:authenticated"], "nonResourceAttributes": {"path": "/version", "verb": "get"}});
        let (_, answer) = ask(Review::SubjectAccessReview, path, &admin, json!({"spec": spec}));
        assert_eq!(answer["status"]["allowed"], true);
        let (code, refused) = ask(Review::SubjectAccessReview, path, &admin, json!({"spec": {}}));
        assert_eq!(code, 422);
        assert_eq!(
            refused["message"],
            "SubjectAccessReview.authorization.k8s.io \"\" is invalid: [spec.resourceAttributes: Invalid value: \
             \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified, spec.user: \
             Invalid value: \"\": at least one of user or group must be specified]"
        );
    }

    #[test]
    fn self_reviews_answer_for_the_caller() {
        let reader = User::service_account("team", "reader");
        let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
        let spec = json!({"resourceAttributes": {"namespace": "team", "verb": "get", "resource": "configmaps"}});
        let (_, answer) = ask(Review::SelfSubjectAccessReview, path, &reader, json!({"spec": spec}));
        assert_eq!(answer["status"], json!({"allowed": false}));
        let whoami = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
        let (_, answer) = ask(Review::SelfSubjectReview, whoami, &reader, json!({}));
        assert_eq!(answer["status"]["userInfo"]["username"], "system:serviceaccount:team:reader");
        assert_eq!(answer["status"]["userInfo"]["uid"], "u-1");
        let rules = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
        let (code, refused) = ask(Review::SelfSubjectRulesReview, rules, &reader, json!({"spec": {}}));
        assert_eq!((code, refused["message"].as_str()), (400, Some("no namespace on request")));
        let (_, answer) = ask(Review::SelfSubjectRulesReview, rules, &reader, json!({"spec": {"namespace": "team"}}));
        assert_eq!(
            answer["status"]["resourceRules"][0]["resources"],
            json!(["selfsubjectaccessreviews", "selfsubjectrulesreviews"])
        );
        assert_eq!(answer["status"]["incomplete"], false);
    }
}
