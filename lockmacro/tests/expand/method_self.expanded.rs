async fn place(&self, id: u64) -> Result<(), AppError> {
    let __lock = match ::lockcore::__private::lock(
            ::lockcore::__private::manager(&(self.locks)),
            [::std::format!("o:{}:{}", self.tenant, id)],
            ::lockcore::__private::Settings {
                ttl_ms: ::core::option::Option::None,
                wait_ms: ::core::option::Option::Some(0u64),
                watchdog: ::core::option::Option::Some(false),
                reentrant: true,
                on_lost: ::lockcore::__private::OnLost::Continue,
                key_template: "o:<self.tenant>:<id>",
            },
        )
        .await
    {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            return <Result<
                (),
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error);
        }
    };
    let lock: &::lockcore::LockGuard = __lock.guard();
    let __lock_outcome = __lock
        .run(async move {
            #[allow(
                unreachable_code,
                clippy::diverging_sub_expression,
                clippy::empty_loop
            )]
            if false {
                let __lock_ret: Result<(), AppError> = loop {};
                return __lock_ret;
            }
            tracing::info!(key = lock.key(), "placing");
            self.place_inner(id).await
        })
        .await;
    match __lock.finish(__lock_outcome).await {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            <Result<
                (),
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error)
        }
    }
}
