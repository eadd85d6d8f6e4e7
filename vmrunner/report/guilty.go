package report

import (
	"regexp"
	"strings"
)

// machinery are the functions a trace passes through on its way to the
// report or the wait, never the bug: the reporting itself (dump_stack,
// __warn, the exception entries), the timer and NMI paths that found a
// lockup or a stall, the scheduler and the sleeping locks a hung task
// waits in, and the entry code. The first reliable frame after them is
// the one to blame, as syzkaller's pkg/report skips its "skip" list.
var machinery = regexp.MustCompile(`^(` + strings.Join([]string{
	// reporting
	`dump_stack(_lvl)?`, `show_stack`, `show_regs`, `show_trace_log_lvl`, `__show_regs`, `print_modules`,
	`__warn`, `__warn_printk`, `warn_slowpath_fmt`, `report_bug`, `handle_bug`, `exc_invalid_op`,
	`asm_exc_invalid_op`, `do_error_trap`, `do_trap`, `die`, `__die`, `__die_body`, `die_addr`, `oops_end`,
	`page_fault_oops`, `kernelmode_fixup_or_oops`, `no_context`, `__bad_area_nosemaphore`,
	`bad_area_nosemaphore`, `do_user_addr_fault`, `handle_page_fault`, `exc_page_fault`,
	`asm_exc_page_fault`, `exc_general_protection`, `asm_exc_general_protection`, `exc_divide_error`,
	`asm_exc_divide_error`, `fixup_exception`, `panic`, `vpanic`, `refcount_warn_saturate`,
	// lockups and stalls: the timer and NMI paths that saw them
	`nmi_cpu_backtrace(_handler)?`, `nmi_trigger_cpumask_backtrace`, `arch_trigger_cpumask_backtrace`,
	`trigger_single_cpu_backtrace`, `dump_cpu_task`, `nmi_handle`, `default_do_nmi`, `exc_nmi`,
	`asm_exc_nmi`, `end_repeat_nmi`, `watchdog_timer_fn`, `watchdog_overflow_callback`,
	`__hrtimer_run_queues`, `hrtimer_interrupt`, `hrtimer_run_queues`, `__sysvec_apic_timer_interrupt`,
	`sysvec_apic_timer_interrupt`, `asm_sysvec_apic_timer_interrupt`, `sysvec_call_function_single`,
	`asm_sysvec_call_function_single`, `update_process_times`, `tick_sched_handle`, `tick_sched_timer`,
	`tick_periodic`, `tick_handle_periodic`, `timer_interrupt`, `__handle_irq_event_percpu`,
	`handle_irq_event`, `handle_edge_irq`, `handle_level_irq`, `__common_interrupt`, `common_interrupt`,
	`asm_common_interrupt`, `__irq_exit_rcu`, `irq_exit_rcu`, `__do_softirq`, `do_softirq`,
	`rcu_.*`, `print_cpu_stall.*`, `print_other_cpu_stall`, `check_cpu_stall`, `rcu_sched_clock_irq`,
	`rcu_dump_cpu_stacks`, `sched_show_task`, `show_state_filter`, `check_hung_task`,
	`check_hung_uninterruptible_tasks`, `watchdog`, `hung_task_panic`,
	// scheduling and sleeping locks: where a hung task waits
	`__schedule`, `schedule`, `schedule_timeout.*`, `schedule_preempt_disabled`, `schedule_hrtimeout.*`,
	`io_schedule(_timeout)?`, `preempt_schedule.*`, `__cond_resched`, `_cond_resched`,
	`__mutex_lock.*`, `mutex_lock.*`, `__mutex_lock_slowpath`, `rwsem_down_(read|write)_slowpath`,
	`down_read.*`, `down_write.*`, `__down.*`, `down`, `down_interruptible`, `down_killable`,
	`wait_for_completion.*`, `__wait_for_common`, `wait_for_common.*`, `do_wait_for_common`,
	`__wait_on_bit.*`, `out_of_line_wait_on_bit.*`, `bit_wait.*`, `__wait_on_buffer`, `wait_on_buffer`,
	`folio_wait_bit.*`, `folio_wait_.*`, `__folio_lock.*`, `__lock_page.*`, `wait_on_page_bit.*`,
	`prepare_to_wait.*`, `finish_wait`, `__wait_event.*`, `wait_woken`, `percpu_rwsem_wait`,
	`__percpu_down_read`, `rt_mutex_.*`, `__rt_mutex_.*`,
	// spinning locks
	`_raw_spin_lock.*`, `_raw_read_lock.*`, `_raw_write_lock.*`, `queued_spin_lock_slowpath`,
	`native_queued_spin_lock_slowpath`, `__pv_queued_spin_lock_slowpath`, `do_raw_spin_lock`,
	`queued_read_lock_slowpath`, `queued_write_lock_slowpath`, `__raw_spin_lock.*`,
	// CPU relaxation inside a loop is the loop's
	`cpu_relax`, `native_safe_halt`, `default_idle`, `arch_cpu_idle`,
	// entry
	`entry_SYSCALL_64.*`, `do_syscall_64`, `ret_from_fork`, `kthread`, `worker_thread`,
	`process_one_work`,
}, "|") + `)$`)

// skip says whether a function is machinery (see above), never the bug.
func skip(fn string) bool {
	// ".cold", ".isra.0", ".constprop.0": parts of the same function.
	if i := strings.IndexByte(fn, '.'); i > 0 {
		fn = fn[:i]
	}
	return machinery.MatchString(fn)
}

// guilty is the index of the frame to blame: the first reliable frame
// outside the machinery, -1 when there is none.
func guilty(r *Report) int {
	for i, f := range r.Frames {
		if !f.Unreliable && !skip(f.Func) {
			return i
		}
	}
	return -1
}
