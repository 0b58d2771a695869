-- Measured intervals per stream, to refuse overlapping records. A stream is one source of
-- usage that must never claim the same second twice: "gpu_usage|node|tenant|lease|gpu_model"
-- or "energy|node|tenant". Derived from the leaves; an admission index, not evidence.
CREATE TABLE intervals (
    stream   TEXT NOT NULL,
    start_at BIGINT NOT NULL,
    end_at   BIGINT NOT NULL,
    idx      BIGINT NOT NULL,
    PRIMARY KEY (stream, start_at)
);
