//! The diesel schema, shared by SQLite and PostgreSQL (portable column types only).

diesel::table! {
    meta (key) {
        key -> Text,
        value -> Text,
    }
}

diesel::table! {
    log_head (id) {
        id -> BigInt,
        size -> BigInt,
        head_hash -> Binary,
    }
}

diesel::table! {
    entries (idx) {
        idx -> BigInt,
        kind -> Text,
        signer -> Text,
        seq -> BigInt,
        tenant -> Nullable<Text>,
        received_at -> BigInt,
        content_hash -> Binary,
        leaf -> Binary,
        leaf_hash -> Binary,
        stream -> Nullable<Text>,
        start_at -> Nullable<BigInt>,
        end_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    usage_rollups (tenant, hour, kind, region, node, gpu_model, lease) {
        tenant -> Text,
        hour -> BigInt,
        kind -> Text,
        region -> Text,
        node -> Text,
        gpu_model -> Text,
        lease -> Text,
        quantity_nanos -> BigInt,
        records -> BigInt,
        last_end -> BigInt,
    }
}

diesel::table! {
    rollup_state (id) {
        id -> BigInt,
        size -> BigInt,
    }
}

diesel::table! {
    tree_hashes (id) {
        id -> BigInt,
        hash -> Binary,
    }
}

diesel::table! {
    checkpoints (size) {
        size -> BigInt,
        root -> Binary,
        note -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    signers (id) {
        id -> Text,
        role -> Text,
        last_seq -> BigInt,
    }
}

diesel::table! {
    signer_keys (key_id) {
        key_id -> Text,
        signer_id -> Text,
        public_key -> Binary,
        registered_idx -> BigInt,
        revoked_idx -> Nullable<BigInt>,
    }
}

diesel::table! {
    conflicts (id) {
        id -> BigInt,
        signer -> Text,
        seq -> BigInt,
        existing_idx -> BigInt,
        received_at -> BigInt,
        envelope -> Text,
    }
}

diesel::allow_tables_to_appear_in_same_query!(signers, signer_keys);

diesel::table! {
    tenants (id) {
        id -> Text,
        name -> Text,
        created_at -> BigInt,
        billing_address -> Nullable<Text>,
        low_balance -> Nullable<Text>,
        usage_alerts -> Nullable<Text>,
    }
}

diesel::table! {
    api_tokens (id) {
        id -> Text,
        token_hash -> Binary,
        role -> Text,
        tenant -> Nullable<Text>,
        label -> Text,
        created_at -> BigInt,
        revoked_at -> Nullable<BigInt>,
        expires_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    invoices (number) {
        number -> Text,
        tenant -> Text,
        currency -> Text,
        period_from -> BigInt,
        period_to -> BigInt,
        checkpoint_size -> BigInt,
        entry_idx -> BigInt,
        json -> Text,
    }
}

diesel::table! {
    certificates (id) {
        id -> Text,
        tenant -> Text,
        period_from -> BigInt,
        period_to -> BigInt,
        checkpoint_size -> BigInt,
        entry_idx -> BigInt,
        json -> Text,
    }
}

diesel::table! {
    cosignatures (size, witness) {
        size -> BigInt,
        witness -> Text,
        line -> Text,
        cosigned_at -> BigInt,
        created_at -> BigInt,
    }
}

diesel::table! {
    witness_state (witness) {
        witness -> Text,
        cosigned_size -> BigInt,
        updated_at -> BigInt,
    }
}

// Webhooks (store::webhooks, docs/WEBHOOKS.md).
diesel::table! {
    webhook_endpoints (id) {
        id -> Text,
        url -> Text,
        tenant -> Nullable<Text>,
        event_types -> Text,
        signing -> Text,
        secret -> Nullable<Text>,
        description -> Text,
        enabled -> Bool,
        disabled_reason -> Nullable<Text>,
        created_at -> BigInt,
        updated_at -> BigInt,
    }
}

diesel::table! {
    webhook_events (id) {
        id -> Text,
        event_type -> Text,
        tenant -> Nullable<Text>,
        log_index -> Nullable<BigInt>,
        dedupe -> Text,
        payload -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    webhook_deliveries (id) {
        id -> Text,
        event_id -> Text,
        endpoint_id -> Text,
        state -> Text,
        attempts -> BigInt,
        schedule_step -> BigInt,
        next_attempt_at -> BigInt,
        lease_owner -> Nullable<Text>,
        lease_until -> Nullable<BigInt>,
        last_status -> Nullable<BigInt>,
        last_error -> Nullable<Text>,
        created_at -> BigInt,
        updated_at -> BigInt,
    }
}

diesel::table! {
    webhook_attempts (delivery_id, attempt) {
        delivery_id -> Text,
        attempt -> BigInt,
        started_at -> BigInt,
        duration_ms -> BigInt,
        status -> Nullable<BigInt>,
        error -> Nullable<Text>,
    }
}

diesel::table! {
    idempotency_keys (scope, key) {
        scope -> Text,
        key -> Text,
        fingerprint -> Text,
        status -> Nullable<BigInt>,
        content_type -> Nullable<Text>,
        body -> Nullable<Binary>,
        created_at -> BigInt,
    }
}

diesel::joinable!(webhook_deliveries -> webhook_events (event_id));
diesel::joinable!(webhook_deliveries -> webhook_endpoints (endpoint_id));
diesel::allow_tables_to_appear_in_same_query!(
    webhook_deliveries,
    webhook_events,
    webhook_endpoints
);
