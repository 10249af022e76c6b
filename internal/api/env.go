package api

// The job contract: environment variables every job is started with (DESIGN.md).
const (
	EnvCUDAVisibleDevices = "CUDA_VISIBLE_DEVICES"
	EnvJobID              = "ROTA_JOB_ID"
	EnvAttempt            = "ROTA_ATTEMPT"
	EnvQueue              = "ROTA_QUEUE"
	EnvTimeLimitEnd       = "ROTA_TIME_LIMIT_END"
	EnvCheckpointDir      = "ROTA_CHECKPOINT_DIR"
	EnvEventsFile         = "ROTA_EVENTS_FILE"
	EnvNoticeFile         = "ROTA_NOTICE_FILE"
	EnvArrayJobID         = "ROTA_ARRAY_JOB_ID"
	EnvArrayIndex         = "ROTA_ARRAY_INDEX"
	EnvNodeList           = "ROTA_NODELIST"
	EnvMasterAddr         = "MASTER_ADDR"
	EnvMasterPort         = "MASTER_PORT"
	EnvNNodes             = "NNODES"
	EnvNodeRank           = "NODE_RANK"
	EnvNProcPerNode       = "NPROC_PER_NODE"
	EnvWorldSize          = "WORLD_SIZE"
)
