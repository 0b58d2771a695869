//! What happened to each record handed to the ledger.

use super::rejection::Rejection;
use serde::{Deserialize, Serialize};

/// Sequence numbers skipped by a signer: `[from, to]` were never seen before this record.
/// Gaps are allowed (a lost record may still arrive later) and reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SeqGap {
    pub from: u64,
    pub to: u64,
}

/// The outcome of one record, in the order the records were given.
///
/// Its OpenAPI schema is written by hand below: derived, the `Rejected` variant would be an
/// `allOf` of [`Rejection`] and the tag inside the `oneOf`, which client generators cannot read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Appended at `index`; committed before this outcome was returned.
    Accepted {
        index: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq_gap: Option<SeqGap>,
    },
    /// The same record (same signer, seq and signed content) is already at `index`.
    Duplicate { index: u64 },
    /// Refused; nothing was appended.
    Rejected(Rejection),
}

impl Outcome {
    /// The log index for accepted and duplicate records.
    pub fn index(&self) -> Option<u64> {
        match self {
            Outcome::Accepted { index, .. } | Outcome::Duplicate { index } => Some(*index),
            Outcome::Rejected(_) => None,
        }
    }
}

/// Three flat alternatives, one per `status` and titled after it (client generators name their
/// classes by the titles), each an object with the members that status serialises: `accepted`
/// (`index`, optional `seq_gap`), `duplicate` (`index`), `rejected` (the members of
/// [`Rejection`]'s own schema, so the two cannot drift apart).
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Outcome {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
        use utoipa::openapi::{Ref, RefOr};
        use utoipa::ToSchema;
        let status = |s: &str| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([s]))
        };
        let accepted = ObjectBuilder::new()
            .title(Some("Accepted outcome"))
            .description(Some(
                "Appended at `index`; committed before this outcome was returned.",
            ))
            .property("index", u64::schema())
            .required("index")
            .property(
                "seq_gap",
                OneOfBuilder::new()
                    .item(ObjectBuilder::new().schema_type(Type::Null))
                    .item(Ref::from_schema_name(SeqGap::name())),
            )
            .property("status", status("accepted"))
            .required("status");
        let duplicate = ObjectBuilder::new()
            .title(Some("Duplicate outcome"))
            .description(Some(
                "The same record (same signer, seq and signed content) is already at `index`.",
            ))
            .property("index", u64::schema())
            .required("index")
            .property("status", status("duplicate"))
            .required("status");
        let RefOr::T(Schema::Object(mut rejected)) = Rejection::schema() else {
            unreachable!("a struct's schema is an inline object")
        };
        rejected.title = Some("Rejected outcome".into());
        rejected.description = Some("Refused; nothing was appended.".into());
        rejected
            .properties
            .insert("status".into(), status("rejected").into());
        rejected.required.push("status".into());
        OneOfBuilder::new()
            .description(Some(
                "The outcome of one record, in the order the records were given.",
            ))
            .item(accepted)
            .item(duplicate)
            .item(rejected)
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Outcome {
    fn schemas(
        out: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        use utoipa::{PartialSchema, ToSchema};
        out.push((SeqGap::name().into(), SeqGap::schema()));
        <SeqGap as ToSchema>::schemas(out);
        <Rejection as ToSchema>::schemas(out);
    }
}
