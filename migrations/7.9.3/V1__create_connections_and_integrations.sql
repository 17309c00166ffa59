-- upgrade-gate migration V1 (release 7.9.3): connections and integrations.
-- An integration's flow is stored as one JSON array of steps.
CREATE TABLE connections (
    id            bigserial PRIMARY KEY,
    name          text        NOT NULL UNIQUE,
    connector     text        NOT NULL,
    configuration jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL
);

CREATE TABLE integrations (
    id          bigserial PRIMARY KEY,
    name        text        NOT NULL UNIQUE,
    description text,
    flow        jsonb       NOT NULL,
    deployed    boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
