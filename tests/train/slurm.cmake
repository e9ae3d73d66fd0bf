# `dice train` through slurm/train.sbatch on a private one-node Slurm cluster
# (tools/slurm/local_cluster.sh): a rank dies at step 3, the job requeues itself and resumes from
# step_000002. Exit 77 = skipped: not root, or slurm-wlm / munge not installed. RUN_SERIAL: the
# cluster's ranks oversubscribe the CPUs, and the test waits on wall-clock requeue delays.
add_test(NAME train_slurm
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm_train_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(train_slurm PROPERTIES TIMEOUT 1200 LABELS "train;slurm" SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
# The same for `dice sft` (slurm/train.sbatch with DICE_SUBCOMMAND=sft), 3 data-parallel ranks.
add_test(NAME sft_slurm
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm_train_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(sft_slurm PROPERTIES TIMEOUT 1200 LABELS "train;sft;slurm" SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;DICE_SLURM_TEST_SUBCOMMAND=sft")
