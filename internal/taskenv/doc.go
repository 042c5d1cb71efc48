// Package taskenv builds a task's environment and interpolates
// ${variables} in its env, config and args. It is pure: everything comes
// in through Input, nothing is read from the host.
//
// The environment of a task is, in this order (a later source never
// overrides an earlier one, so a job cannot change what berth tells a task
// about itself):
//
//	BERTH_ALLOC_ID, BERTH_ALLOC_NAME, BERTH_ALLOC_INDEX, BERTH_ALLOC_DIR,
//	BERTH_TASK_DIR, BERTH_SECRETS_DIR, BERTH_TASK_NAME, BERTH_GROUP_NAME,
//	BERTH_JOB_ID, BERTH_JOB_NAME, BERTH_NODE_ID, BERTH_NODE_NAME,
//	BERTH_CPU_LIMIT (MHz), BERTH_MEMORY_LIMIT (MB)
//	BERTH_META_<key>   job, group and task meta (the task's wins over the
//	                   group's, the group's over the job's), under the key
//	                   as written and, when different, upper-cased with
//	                   '.' and '-' turned into '_'
//	the task's env     each value interpolated
//
// Hooks add to it afterwards (Env.WithEnv: BERTH_VOLUME_<NAME>, ...).
//
// # Interpolation
//
// "${name}" in a string is replaced by the value of name:
//
//	${node.unique.id}, ${node.unique.name}   the node's ID and name
//	${attr.<key>}                            a node attribute (see NodeAttributes)
//	${meta.<key>}                            a node meta value (agent config client.meta)
//	${env.<NAME>}, ${<NAME>}                 a variable of the task's environment
//	                                         (BERTH_... included)
//	anything a hook added with Env.WithVars  e.g. ${volume.<name>}
//
// A name that is none of these is left as it is written, "${...}" included,
// as Nomad does: a shell script in a config block may use ${VAR} of its own,
// and a job that relied on an attribute a node lacks shows the literal
// text in its config rather than failing to start. Interpolation is one
// pass: a value that itself contains "${" is not expanded again.
//
// Config values are interpolated wherever they hold text: strings, every
// element of a list and every value of a map. Ints, bools and durations
// are left alone.
package taskenv
